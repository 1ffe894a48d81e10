import os, subprocess, sys, tempfile
sys.path.insert(0, "tests"); sys.path.insert(0, sys.argv[1])
os.environ["WICK_CACHE_DIR"] = tempfile.mkdtemp()
import wick._C as C; C.env_reload()
import test_prelude_exp as T
d = tempfile.mkdtemp(); c = f"{d}/u.c"; open(c, "w").write(T.DRIVER % T.prelude_exp_text())
subprocess.run(["gcc", "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=fast", c, "-o", f"{d}/u", "-lm"], check=True)
for lo, hi in ((-104, 0), (0, 89), (-1e38, -104), (89, 1e38)):
    print(lo, hi, subprocess.run([f"{d}/u", str(lo), str(hi), "1"], capture_output=True, text=True).stdout.strip(), flush=True)
