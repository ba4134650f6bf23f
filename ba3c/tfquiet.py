"""Import TensorFlow without its C++ start-up chatter, keeping anything else it prints.

TF 2.21 logs through absl before absl's logging is initialised, so TF_CPP_MIN_LOG_LEVEL does not
reach two lines that every start prints twice (once per shared library): "All log messages before
absl::InitializeLog() is called are written to STDERR" and "oneDNN custom operations are on ...".
They are informational. Standard error is captured at the file-descriptor level during the import,
and every other line is written back, so real errors and warnings still show.
"""
from __future__ import annotations

import os
import sys
import tempfile

KNOWN_NOISE = ("All log messages before absl::InitializeLog() is called", "oneDNN custom operations are on")


def import_tensorflow_quietly() -> None:
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's own later INFO/WARNING lines; errors still show
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not any(n in line for n in KNOWN_NOISE)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
