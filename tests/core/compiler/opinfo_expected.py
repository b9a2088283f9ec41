"""Known OpInfo failures of the ember backend: ``"op_name:variant"`` -> (status, reason).

``op_name`` is the OpInfo name plus ``.variant_test_name`` when it has one; ``variant`` one
of ``opinfo_runner.VARIANTS``. ``status`` is only ever
``"error"``: a wrong result is never a known failure (fix the compiler, or make the lowering
raise ``Unsupported`` so the node runs in eager ATen). Every entry says why, and a claim
that torch itself fails is checked against Inductor (``ember bench opinfo`` runs both).
``test_opinfo.py`` fails when an entry starts passing, so the table cannot go stale.
"""

_EXPANDED_RUNNING_STATS = (
    "training with expanded (stride-0) running statistics: eager writes each channel's "
    "update into one memory location unchecked, and Dynamo's fake-tensor pass raises 'more "
    "than one element of the written-to tensor refers to a single memory location' before "
    "any backend runs (backend='eager' and Inductor raise the same)")

EXPECTED_FAILURES: dict[str, tuple[str, str]] = {
    "_batch_norm_with_update:float32_expanded": ("error", _EXPANDED_RUNNING_STATS),
    "_native_batch_norm_legit:float32_expanded": ("error", _EXPANDED_RUNNING_STATS),
    "native_batch_norm:float32_expanded": ("error", _EXPANDED_RUNNING_STATS),
    "nn.functional.batch_norm:float32_expanded": ("error", _EXPANDED_RUNNING_STATS),
}
