"""Default hyper-parameters of the distributed MNIST example, kept free of TensorFlow imports.

Why a separate file: LaunchTFServerWithHooks.py needs them to parse its flags, and must not import
TensorFlow before the library has set CUDA_VISIBLE_DEVICES for this task (GPU nodes).

Chosen so 1 ps + 2 async workers reach >= 0.95 held-out accuracy on the 2k held-out split of the
10k MNIST test digits in well under two minutes on two cores (measured: about 0.98 after 800
global steps, about 25 s of training).
"""

BATCH_SIZE = 64
ITERATIONS = 800
LEARNING_RATE = 2e-3  # Adam
EVAL_EVERY = 200
