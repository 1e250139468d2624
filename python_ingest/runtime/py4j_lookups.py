"""Py4J name look-ups answered once per process instead of once per use.

Every ``jvm.org.apache.hadoop.fs.Path`` in Python (sluice's own, and pyspark's ``sc._jvm.*``
behind most DataFrame calls) asks the JVM, one round trip per dot, whether each prefix is a
class or a package. The JVM answers "package" only after its class loader failed to find a
class of that name in every jar of the driver's class path (about 270 with pyspark's), and
a short name on the ``JVMView`` is tried in each package pyspark imported: a profile of the
test suite's Spark driver (JFR) spent 7 % of its samples in those failed look-ups, and
``jvm.org.apache.hadoop.fs.Path`` took 1.5 ms.

``install`` keeps each answer on the object that asked: a package's sub-package or class, a
class's static method or nested class. What a name is does not change while a JVM runs (a
jar added later adds classes under new names; a name already answered as a class stays one).
Static *fields* are read each time (their values may change), and a name the JVM did not know
is asked again next time. ``SLUICE_PY4J_CACHE=off`` leaves Py4J as it is.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "SLUICE_PY4J_CACHE"
_installed = False


def _remembering(lookup: Any, keep: tuple[type, ...]) -> Any:
    def __getattr__(self: Any, name: str) -> Any:  # noqa: N807 (the patched method's name)
        found = lookup(self, name)
        if isinstance(found, keep) and not name.startswith("__"):
            # on the instance: the next access finds it without calling __getattr__
            self.__dict__[name] = found
        return found

    __getattr__.__wrapped__ = lookup  # type: ignore[attr-defined]
    return __getattr__


def install() -> bool:
    """Remember Py4J's name look-ups from now on in this process (once; idempotent). Returns
    whether they are remembered."""
    global _installed
    if _installed:
        return True
    if os.environ.get(ENV, "on").strip().lower() in ("off", "0", "false", "no"):
        return False
    from py4j import java_gateway as gw

    kinds = ("JVMView", "JavaPackage", "JavaClass", "JavaMember")
    if not all(hasattr(gw, kind) for kind in kinds):  # another Py4J: leave it alone
        return False
    # a package or a view names packages and classes; a class names its static methods
    # (JavaMember) and nested classes (JavaClass); a static field's value is not kept
    gw.JVMView.__getattr__ = _remembering(gw.JVMView.__getattr__,
                                          (gw.JavaPackage, gw.JavaClass))
    gw.JavaPackage.__getattr__ = _remembering(gw.JavaPackage.__getattr__,
                                              (gw.JavaPackage, gw.JavaClass))
    gw.JavaClass.__getattr__ = _remembering(gw.JavaClass.__getattr__,
                                            (gw.JavaMember, gw.JavaClass))
    _installed = True
    return True
