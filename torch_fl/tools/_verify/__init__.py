"""The machinery of `python -m torch_fl.tools.verify_routes`, one concept per module:
`_record` (realistic calls per ATen overload), `_cases` (input variants), `_check` (one
operator: compare and time two routes), `_classify` (operators never routed), `_conf` (the
routing table written) and `_state` (incremental, resumable results)."""
