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


def test_op_table_rows_name_their_kind_and_shape_rule():
    # wick/_graph_layout.py picks the ops it may replay on permuted operands
    # by these two columns (plain pointwise: kind pointwise, shape broadcast)
    import wick._C as C

    rows = {r["name"]: r for r in C.op_table()}
    assert (rows["RELU"]["kind"], rows["RELU"]["shape"]) == ("pointwise", "broadcast")
    assert (rows["MEAN"]["kind"], rows["MEAN"]["shape"]) == ("reduction", "reduce")
    assert (rows["SOFTMAX"]["kind"], rows["SOFTMAX"]["shape"]) == ("pointwise", "same_dim")
    assert rows["VIEW"]["shape"] == "view" and rows["CAT"]["shape"] == "cat"
    assert {r["kind"] for r in rows.values()} <= {"pointwise", "reduction", "constant", "extern"}
    assert {r["shape"] for r in rows.values()} <= {"broadcast", "reduce", "same_dim", "scalar", "view", "cat", "pad",
                                                   "index", "gather", "one_hot", "sizes", "scatter"}
