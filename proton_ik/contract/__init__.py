"""What the writer and the reader agree on, each fact in one home: the buffer layout
(``layout``), the kernel metadata (``metadata``) and the session file format
(``session_format``). These modules import nothing else of proton_ik, so every room may
import them."""
