"""The generated promotion/shape table that the C graph tests check must
agree with the torch that is installed: a torch upgrade that changes a rule
is caught here."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_promotion_table_is_current():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gen_promotion_table.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
