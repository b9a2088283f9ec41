"""Runtime support: building generated C++ and the on-disk kernel cache."""
