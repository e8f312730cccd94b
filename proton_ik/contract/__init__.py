"""What the writer and the reader agree on, each fact in one home: the buffer layout
(``layout``), a buffer seen through it (``buffer_view``) and its trimmed form (``trimmed``), the
kernel metadata (``metadata``, with the scope-name rule in ``names`` and the JSON value rules in
``fields``) and the session file format (``session_format``). These modules import nothing else
of proton_ik, so every room may import them."""
