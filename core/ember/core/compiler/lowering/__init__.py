"""Lowering: an ATen/prims FX graph -> loop IR (Pointwise, Reduction, Extern nodes).

``builders`` holds what every lowering builds with (the per-node context, broadcasting loads,
pointwise values, reductions); ``ops`` is the op table (ATen overload -> lowering);
``externs`` the extern ops and their device-dependent rewrites (skinny matmuls, oneDNN's
linear, gather/scatter selects); ``pooling`` max pooling without its indices as a pointwise
max; ``foreach`` the optimizers' ``_foreach_*`` ops; ``graph`` the walk over the FX graph
(``GraphLowering``).
"""
