"""``make bench-headline`` refuses to measure a checkout whose record decoder is not built."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from benchmarks import headline


def test_headline_refuses_a_checkout_without_the_native_decoder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def recorder(name: str) -> Callable[[Sequence[str] | None], int]:
        def run(argv: Sequence[str] | None) -> int:
            ran.append(name)
            return 0

        return run

    monkeypatch.setattr(headline, "native_available", lambda: False)
    monkeypatch.setattr(
        headline,
        "HEADLINES",
        tuple(
            headline.Headline(h.name, recorder(h.name), h.argv, h.results)
            for h in headline.HEADLINES
        ),
    )
    with pytest.raises(SystemExit) as stopped:
        headline.main(["--only", "consume-throughput"])
    assert stopped.value.code == 2
    assert ran == []
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "native record decoder is not built" in error
