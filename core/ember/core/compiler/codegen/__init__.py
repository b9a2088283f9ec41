"""Code generators over scheduled kernels: ``cpp`` (C++/OpenMP) and the Python ``wrapper``."""
