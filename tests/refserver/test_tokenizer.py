"""The reference server's byte-level tokenizer: printable ASCII round-trips, ids above the
bytes decode to deterministic printable words, each token on its own."""

from __future__ import annotations

import pytest

from orchestrator.refserver.presets import BOS_ID, EOS_ID
from orchestrator.refserver.tokenizer import ByteTokenizer


def test_tokenizer_round_trips_printable_ascii():
    tok = ByteTokenizer(512)
    text = "".join(chr(c) for c in range(32, 127)) + "\nline two\t."
    ids = tok.encode(text)
    assert ids[0] == BOS_ID and all(i < 256 for i in ids[1:])
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, add_bos=False)) == text


def test_tokenizer_high_ids_are_printable_and_deterministic():
    tok = ByteTokenizer(128256)
    pieces = [tok.piece(i) for i in range(EOS_ID + 1, 128256, 997)]
    assert all(p.startswith(" ") and p[1:].isalpha() and p.isprintable() for p in pieces)
    assert tok.piece(EOS_ID) == "" and tok.piece(BOS_ID) == ""
    assert ByteTokenizer(128256).piece(300) == tok.piece(300)
    assert tok.piece(7) == "<0x07>"
    with pytest.raises(ValueError):
        tok.piece(128256)
