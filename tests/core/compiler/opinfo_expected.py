"""Known OpInfo failures of the ember backend: ``"op_name:variant"`` -> (status, reason).

``op_name`` is the OpInfo name plus ``.variant_test_name`` when it has one; ``variant`` one
of ``opinfo_runner.VARIANTS``. ``status`` is only ever
``"error"``: a wrong result is never a known failure (fix the compiler, or make the lowering
raise ``Unsupported`` so the node runs in eager ATen). Every entry says why, and a claim
that torch itself fails is checked against Inductor (``ember bench opinfo`` runs both).
``test_opinfo.py`` fails when an entry starts passing, so the table cannot go stale.
"""

EXPECTED_FAILURES: dict[str, tuple[str, str]] = {
}
