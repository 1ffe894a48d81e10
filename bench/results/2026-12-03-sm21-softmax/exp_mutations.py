import os, subprocess, sys, tempfile
sys.path.insert(0, "tests"); sys.path.insert(0, "tests/codegen")
os.environ["WICK_CACHE_DIR"] = tempfile.mkdtemp()
import wick._C as C; C.env_reload()
import test_prelude_exp as T
text = T.prelude_exp_text()
muts = {
  "none": [],
  "short path to |x|<=88": [("ax <= WK_V8(87.0f)", "ax <= WK_V8(88.0f)")],
  "no ln2lo": [("WK_FMA(n, -ln2lo, WK_FMA(n, -ln2hi, x))", "WK_FMA(n, -ln2hi, x)")],
  "degree 5": [("q = WK_FMA(q, r, WK_V8(0x1.fffffcp-2f));", "")],
  "slow path one scale": [("s1 * s2", "(wk_v8f)((ni + 127) << 23)")],
  "nan not kept": [("((wk_v8i)(x + x) & nan) | ((wk_v8i)y & ~nan)", "(wk_v8i)y")],
}
d = tempfile.mkdtemp()
for name, reps in muts.items():
    t = text
    for a, b in reps:
        assert a in t, a; t = t.replace(a, b)
    res = []
    for prog, body in (("ulp", T.DRIVER), ("sp", T.SPECIALS)):
        c = f"{d}/{prog}.c"; open(c, "w").write(body % t)
        subprocess.run(["gcc", "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=fast", c, "-o", f"{d}/{prog}", "-lm"], check=True)
    fails = []
    for lo, hi, st in T.RANGES:
        out = subprocess.run([f"{d}/ulp", str(lo), str(hi), str(st)], capture_output=True, text=True).stdout.split()
        if float(out[1]) > 1.0: fails.append(f"[{lo},{hi}]: {out[1]} ulp at {out[2]}")
    sp = subprocess.run([f"{d}/sp"], capture_output=True, text=True).stdout.split()
    print(name, "->", fails or "ulp ok", sp)
