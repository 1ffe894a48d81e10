"""The generated embedding backward (micro_embedding_backward.c, BERT's word embedding: 1024 x 128
from 2 x 64 indices, padding_idx 0) vs torch.ops.aten.embedding_dense_backward, 1 thread.
    cc -O2 -march=native -fopenmp -fno-math-errno -fPIC -shared -mprefer-vector-width=512 \
        micro_embedding_backward.c -o /tmp/eb.so && python micro_embedding_backward.py"""
import ctypes
import time

import torch

torch.set_num_threads(1)
lib = ctypes.CDLL("/tmp/eb.so")
grad, idx = torch.randn(2, 64, 128), torch.randint(0, 1024, (2, 64))


def native():
    out = torch.empty(1024, 128)
    lib.eb((ctypes.c_void_p * 3)(grad.data_ptr(), idx.data_ptr(), out.data_ptr()))
    return out


def extern():
    return torch.ops.aten.embedding_dense_backward(grad, idx, 1024, 0, False)


assert torch.equal(native(), extern())
for _ in range(3):
    for name, f in (("generated", native), ("extern", extern)):
        t = time.process_time()
        for _ in range(3000):
            f()
        print(name, f"{(time.process_time() - t) / 3000 * 1e6:.1f} us")
