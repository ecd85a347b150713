"""The ownership map: bundle → owner broker id, indexed by owner (the simulated cluster's ``ownership``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any, Self


class Ownership(dict[str, str]):
    """bundle → owner broker id, indexed by owner so a broker's bundles are found without a scan.

    A plain dict to read (``dict(ownership)``, ``.items()``, ``.get``); every write keeps the index
    (``by_owner``) and bumps the version of each broker whose bundles changed (``version_of``).
    """

    def __init__(self, items: Any = ()) -> None:
        super().__init__()
        self.by_owner: dict[str, set[str]] = {}
        self._versions: dict[str, int] = {}
        self._counter = itertools.count(1)
        self.update(items)

    def version_of(self, owner: str) -> int:
        return self._versions.get(owner, 0)

    def owned(self, owner: str) -> set[str]:
        return self.by_owner.get(owner, set())

    def _index(self, bundle: str, owner: str, add: bool) -> None:
        if add:
            self.by_owner.setdefault(owner, set()).add(bundle)
        else:
            self.by_owner.get(owner, set()).discard(bundle)
        self._versions[owner] = next(self._counter)

    def __setitem__(self, bundle: str, owner: str) -> None:
        previous = dict.get(self, bundle)
        if previous == owner:
            return
        if previous is not None:
            self._index(bundle, previous, add=False)
        dict.__setitem__(self, bundle, owner)
        self._index(bundle, owner, add=True)

    def __delitem__(self, bundle: str) -> None:
        owner = dict.__getitem__(self, bundle)
        dict.__delitem__(self, bundle)
        self._index(bundle, owner, add=False)

    _MISSING: Any = object()

    def pop(self, bundle: str, default: Any = _MISSING) -> Any:
        if bundle in self:
            owner = dict.__getitem__(self, bundle)
            del self[bundle]
            return owner
        if default is Ownership._MISSING:
            raise KeyError(bundle)
        return default

    def popitem(self) -> tuple[str, str]:
        bundle, owner = dict.popitem(self)
        self._index(bundle, owner, add=False)
        return bundle, owner

    def setdefault(self, bundle: str, owner: Any = None) -> Any:
        if bundle not in self:
            self[bundle] = owner
        return dict.__getitem__(self, bundle)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for bundle, owner in dict(*args, **kwargs).items():
            self[bundle] = owner

    # mypy holds ``|=`` to dict's ``|``, which may widen the types; typeshed's dict ``|=`` takes str → str only too
    def __ior__(self, other: Mapping[str, str] | Iterable[tuple[str, str]]) -> Self:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        for owner in list(self.by_owner):
            self._versions[owner] = next(self._counter)
        dict.clear(self)
        self.by_owner.clear()

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Ownership, (dict(self),))
