"""Groups the kernels of wick's generated Triton modules (a cache folder's triton/*.py) by what their machine code
depends on (wick._triton.kernel_identity: the text without the name): per module, how many kernels and how many
distinct ones, and for kernels in a group of one, the stage and kernel names, so a layer's kernels that fail to
dedupe across layers show. Usage: python kernel_groups.py <cache folder>..."""
import collections
import glob
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from wick import _triton  # noqa: E402

for folder in sys.argv[1:]:
    for path in sorted(glob.glob(os.path.join(folder, "**", "wick_*.py"), recursive=True)):
        index = _triton._index_module(path) or {}
        groups = collections.defaultdict(list)
        for name, entry in index.items():
            groups[str(entry[0])].append(name.rsplit("_", 2)[-2] + "_" + name.rsplit("_", 2)[-1]
                                         if not name.endswith("_final") else name.rsplit("_", 3)[-3] + "_" +
                                         name.rsplit("_", 3)[-2] + "_final")
        sizes = sorted((len(v) for v in groups.values()), reverse=True)
        print(f"{folder} {os.path.basename(path)}: {len(index)} kernels, {len(groups)} distinct; group sizes {sizes[:30]}")
        print("  alone:", " ".join(v[0] for v in groups.values() if len(v) == 1))
