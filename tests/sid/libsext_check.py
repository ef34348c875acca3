"""Imports the libsext extension (rocBLAS, hipBLAS, hipBLASLt, MIOpen on the real runtime,
loaded RTLD_LOCAL as PyTorch's are) and runs the libraries' workload with this script's
arguments (those of libs_check)."""
import sys

import libsext

print("libsext: dlopen flags", sys.getdlopenflags(), flush=True)
sys.exit(libsext.main(sys.argv[1:]))
