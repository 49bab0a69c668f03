"""What the tests of the Python client package tlserve (codec/python, test_tlwire_*.py) share:
the package on sys.path (nothing needs installing) and an assertion on WireError codes."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "codec", "python"))
import tlserve as w  # noqa: E402
from tlserve import ErrorCode as E  # noqa: E402

__all__ = ["w", "E", "WireErrorMixin"]


class WireErrorMixin:
    def assertWireError(self, code, fn, *args, **kwargs):
        with self.assertRaises(w.WireError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code,
                         "expected %s, got %s" % (w.error_name(code), cm.exception))
        return cm.exception
