"""The result of :func:`kir.compile`."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Union

from . import _kir


class Kernel:
    """A compiled module: its code (PTX, CUDA C or IR) and its launch metadata.

    Instances come from :func:`kir.compile` or :meth:`Kernel.from_ptx`; they are immutable.
    The compilation itself (the module that was lowered, the backend's reports) stays attached
    to the kernel.
    """

    __slots__ = ("_native",)

    def __init__(self, native: _kir.Compiled) -> None:
        self._native = native

    @property
    def target(self) -> str:
        """The target compiled for: ``sm_80``, ``sm_90a``, ``sm_100a`` or ``sm_120a``."""
        return self._native.target

    @property
    def emit(self) -> str:
        """What was emitted: ``ptx``, ``cuda`` or ``ir``."""
        return self._native.emit

    @property
    def text(self) -> str:
        """The emitted text, whatever its language (what ``kirc compile -o`` writes)."""
        return self._native.text

    @property
    def ptx(self) -> str:
        """The PTX module (``emit="ptx"``); an ``AttributeError`` for other emits."""
        return self._text_of("ptx")

    @property
    def cuda(self) -> str:
        """The CUDA C source (``emit="cuda"``); an ``AttributeError`` for other emits."""
        return self._text_of("cuda")

    @property
    def ir(self) -> str:
        """The IR of the lowered stage as canonical text (``emit="ir"``); an
        ``AttributeError`` for other emits."""
        return self._text_of("ir")

    @property
    def meta(self) -> Optional[Dict[str, Any]]:
        """The launch metadata: a dict equal to the META.json ``kirc compile --meta`` writes
        for the same compilation (docs/backends.md), or ``None`` for ``emit="ir"``. Each
        access returns a new dict."""
        text = self._native.meta_json
        return None if text is None else json.loads(text)

    @property
    def symbols(self) -> List[str]:
        """The ``.entry`` symbol of every kernel, in META.json's order (empty for IR)."""
        meta = self.meta
        return [] if meta is None else [k["symbol"] for k in meta["kernels"]]

    @property
    def symbol(self) -> str:
        """The symbol of the one kernel (``meta["kernels"][0]["symbol"]``). An
        ``AttributeError`` for IR, which has none, and for a program of several kernels
        (see :attr:`symbols`)."""
        if self.emit == "ir":
            raise AttributeError("a kernel compiled with emit='ir' has no symbol (no launch metadata)")
        symbols = self.symbols
        if len(symbols) != 1:
            raise AttributeError(
                f"the module compiled to {len(symbols)} kernels ({', '.join(symbols)}): see Kernel.symbols"
            )
        return symbols[0]

    @property
    def lowered(self) -> str:
        """The module that was lowered to :attr:`text` (after the scheduling passes), as
        canonical IR text: what ``kirc compile --lowered FILE`` writes, and what
        :meth:`Kernel.from_ptx` takes back."""
        return self._native.lowered

    @classmethod
    def from_ptx(cls, ptx: str, meta: Union[str, Dict[str, Any]], lowered: str) -> "Kernel":
        """A kernel from the files of a compilation made elsewhere, to launch with
        :mod:`kir.torch` (``kir.torch.launch``, ``kir.torch.bind``) exactly as compiled.

        Args:
            ptx: the PTX text (``kirc compile -o``), or PTX that NVRTC made from the CUDA C of
                ``kirc compile --emit cuda`` (the same kernels, symbols and launch ABI).
            meta: its META.json (``kirc compile --meta``), as text or as a dict.
            lowered: the module that was lowered to it (``kirc compile --lowered``; or
                :attr:`Kernel.lowered`).

        Returns:
            A kernel with ``emit == "ptx"``, the target META.json names, ``.ptx``, ``.meta`` and
            ``.lowered`` as given; ``.report`` is empty and ``.cache`` is ``cache: off``.

        Raises:
            InputError: ``meta`` is not JSON or names no known target (argument ``meta``), the
                module does not parse, verify or is not fully specialized (``lowered``),
                META.json does not list the module's kernels with their launch ABI (``meta``:
                a stale file, or one of another compilation), or the PTX lacks a kernel's
                ``.entry`` (``ptx``).
        """
        text = meta if isinstance(meta, str) else json.dumps(meta)
        return cls(_kir.from_ptx(ptx, text, lowered))

    @property
    def report(self) -> str:
        """The PTX backend's lowering decisions of each kernel, the schedules the search
        passed over and the fusion decision (``kirc compile --report``); empty for CUDA C
        and IR."""
        return self._native.report

    @property
    def cache(self) -> str:
        """What the on-disk cache did: ``cache: hit KEY``, ``cache: stored KEY`` or
        ``cache: off``."""
        return self._native.cache

    def _text_of(self, emit: str) -> str:
        if self.emit != emit:
            raise AttributeError(f"this kernel was compiled with emit={self.emit!r}, not {emit!r}: use Kernel.text")
        return self._native.text

    def __repr__(self) -> str:
        kernel = f", kernel={self._native.kernel!r}" if self._native.kernel else ""
        return f"<kir.Kernel {self._native.source_name} target={self.target!r} emit={self.emit!r}{kernel}>"
