"""python -m mambago: info, run and bench on a fixture model."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import case_dir


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mambago", *args], capture_output=True, text=True, timeout=300)


def test_info():
    r = cli("info", case_dir("base"), "--device", "cpu")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["device"] == "cpu" and info["device_index"] is None and info["config"]["hidden_size"] == 64


def test_run_prints_tokens_and_timing():
    r = cli("run", case_dir("base"), "--prompt-ids", "5,17,33,2;1,2,3,4", "--max-new-tokens", "6")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    gen = [l for l in lines if l.startswith("generated[")]
    assert len(gen) == 2 and all(len(l.split(":")[1].split()) == 6 for l in gen)
    assert "tok/s" in r.stdout and "prefill" in r.stdout


def test_run_takes_rows_of_different_lengths():
    """Rows of different lengths run as a left-padded batch: each row's
    tokens are what it generates alone."""
    ragged = cli("run", case_dir("base"), "--prompt-ids", "5,17,33,2;1,2", "--max-new-tokens", "5", "--device", "cpu")
    assert ragged.returncode == 0, ragged.stderr
    assert "rows left-padded" in ragged.stdout
    for b, prompt in enumerate(("5,17,33,2", "1,2")):
        alone = cli("run", case_dir("base"), "--prompt-ids", prompt, "--max-new-tokens", "5", "--device", "cpu")
        assert alone.returncode == 0, alone.stderr
        want = [l.split(":")[1] for l in alone.stdout.splitlines() if l.startswith("generated[0]")]
        got = [l.split(":")[1] for l in ragged.stdout.splitlines() if l.startswith(f"generated[{b}]")]
        assert got == want, (got, want)
        assert f"prompt[{b}]:    {prompt.replace(',', ' ')}" in ragged.stdout


def test_bench_table_and_json(tmp_path):
    out = tmp_path / "b.json"
    r = cli("bench", case_dir("base"), "--lengths", "8,32", "--batch", "1,2", "--repeats", "2", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(x["B"], x["T"]) for x in rows] == [(1, 8), (1, 32), (2, 8), (2, 32)]
    assert all(x["tok_s"] > 0 for x in rows)


def test_run_stops_at_the_configs_eos():
    """run stops a row at the config's eos by default, as transformers'
    generate does, padding it with eos; --eos-token-id -1 runs on."""
    def generated(*flags):
        r = cli("run", case_dir("base"), "--prompt-ids", "5,17,33,2,9,41,7,8;1,2,3,4,5,6,7,8", "--max-new-tokens",
                "16", "--device", "cpu", *flags)
        assert r.returncode == 0, r.stderr
        return [[int(t) for t in l.split(":")[1].split()] for l in r.stdout.splitlines() if l.startswith("generated[")]

    eos = json.loads(open(f"{case_dir('base')}/config.json").read())["eos_token_id"]
    free, stopped = generated("--eos-token-id", "-1"), generated()
    assert len(free) == 2 and all(len(row) == 16 for row in free)
    for got, row in zip(stopped, free, strict=True):
        k = row.index(eos) + 1 if eos in row else len(row)
        assert got[:k] == row[:k] and set(got[k:]) <= {eos}, (got, row)
    late = generated("--min-new-tokens", "14")  # eos kept out of each row's first 14
    assert all(eos not in row[:14] for row in late), late


def test_run_takes_a_repetition_penalty():
    """--repetition-penalty gives Model.generate's tokens under that penalty;
    one of 0 is refused with the library's reason."""
    import mambago

    r = cli("run", case_dir("base"), "--prompt-ids", "5,17,33,2", "--max-new-tokens", "8", "--device", "cpu",
            "--repetition-penalty", "1.8")
    assert r.returncode == 0, r.stderr
    got = [l.split(":")[1].split() for l in r.stdout.splitlines() if l.startswith("generated[0]")]
    m = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    want = m.generate(np.array([[5, 17, 33, 2]]), 8, repetition_penalty=1.8)
    assert got == [[str(t) for t in want[0]]], (got, want)
    r = cli("run", case_dir("base"), "--prompt-ids", "5,17", "--device", "cpu", "--repetition-penalty", "0")
    assert r.returncode != 0 and "repetition_penalty" in r.stderr


def test_run_takes_beams():
    """--num-beams runs beam search and prints each row's best beam, as
    Model.beam_search gives it (the config's eos ending beams); with
    --temperature, beam sampling, as Model.beam_search draws it for the
    seed."""
    import mambago

    r = cli("run", case_dir("base"), "--prompt-ids", "5,17,33,2;9,8", "--max-new-tokens", "7", "--device", "cpu",
            "--num-beams", "3", "--length-penalty", "0.5")
    assert r.returncode == 0, r.stderr
    got = [l.split(":")[1].split() for l in r.stdout.splitlines() if l.startswith("generated[")]
    m = mambago.Model.from_pretrained(case_dir("base"), device="cpu")
    want = m.beam_search(np.array([[5, 17, 33, 2], [0, 0, 9, 8]]), 7, 3, length_penalty=0.5,
                         eos_token_id=m.config.eos_token_id, attention_mask=np.array([[1, 1, 1, 1], [0, 0, 1, 1]]))
    assert got == [[str(t) for t in row] for row in want.tokens], (got, want)
    r = cli("run", case_dir("base"), "--prompt-ids", "5,17", "--device", "cpu", "--num-beams", "2", "--temperature", "0.7",
            "--top-k", "30", "--seed", "4", "--max-new-tokens", "6")
    assert r.returncode == 0, r.stderr
    got = [l.split(":")[1].split() for l in r.stdout.splitlines() if l.startswith("generated[")]
    want = m.beam_search(np.array([[5, 17]]), 6, 2, do_sample=True, temperature=0.7, top_k=30, seed=4,
                         eos_token_id=m.config.eos_token_id)
    assert got == [[str(t) for t in row] for row in want.tokens], (got, want)


def test_bad_arguments_exit_cleanly():
    r = cli("run", case_dir("base"), "--prompt-ids", "1,2,x")
    assert r.returncode == 2 and "prompt-ids" in r.stderr
    r = cli("run", case_dir("base"), "--prompt-ids", "1,2;;3")
    assert r.returncode == 2 and "non-empty" in r.stderr
    r = cli("run", case_dir("base"), "--prompt-ids", "1,2,100000")
    assert r.returncode == 2 and "vocabulary" in r.stderr
    r = cli("run", case_dir("base"), "--prompt-ids", f"1,{10**20}")
    assert r.returncode == 2 and "int64" in r.stderr and "Traceback" not in r.stderr, r
    r = cli("info", "/nonexistent/model")
    assert r.returncode == 2 and "error" in r.stderr
    for flag, value in (("--lengths", "8,0"), ("--batch", "0"), ("--lengths", ",")):
        r = cli("bench", case_dir("base"), flag, value)
        assert r.returncode == 2 and "at least 1" in r.stderr and "median" not in r.stdout, (flag, value, r)
    for args in (("bench", case_dir("base"), "--repeats", "0"), ("run", case_dir("base"), "--prompt-ids", "1", "--num-beams", "0")):
        r = cli(*args)
        assert r.returncode == 2 and "at least 1" in r.stderr, (args, r)
    # A --json folder that does not exist is refused before the timing, not after it.
    r = cli("bench", case_dir("base"), "--lengths", "8", "--json", "/nonexistent/bench.json")
    assert r.returncode == 2 and "--json" in r.stderr and "median" not in r.stdout, r
    # An output too large to allocate is an error line, not a traceback.
    r = cli("run", case_dir("base"), "--prompt-ids", "1,2", "--max-new-tokens", str(2**58))
    assert r.returncode == 2 and "max_new_tokens" in r.stderr and "Traceback" not in r.stderr, r


def test_ctrl_c_exits_130_without_a_traceback():
    """Ctrl-C during a long bench: "interrupted" and the shell's 130, as a command line tool ends."""
    if sys.platform == "win32":
        pytest.skip("POSIX signals")
    import signal
    import time
    # Python's default Ctrl-C handler even where this run was started with SIGINT ignored (a background job).
    p = subprocess.Popen([sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                          "from mambago.__main__ import main; sys.exit(main(sys.argv[1:]))",
                          "bench", case_dir("base"), "--lengths", "4096", "--repeats", "100000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "median" in p.stdout.readline()  # the table's header: the model is loaded and the timing under way
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, (p.returncode, err)


def with_tokenizer(tmp_path):
    """The base fixture beside a word-level tokenizer.json: "t5" is token 5."""
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed")
    folder = tmp_path / "base"
    shutil.copytree(case_dir("base"), folder)
    vocab_size = json.loads((folder / "config.json").read_text())["vocab_size"]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tk.save(str(folder / "tokenizer.json"))
    return str(folder)


def test_run_takes_text_through_the_tokenizer(tmp_path):
    """--prompt text is the token ids its tokenizer gives: the same tokens
    as --prompt-ids, and the whole text printed back decoded."""
    folder = with_tokenizer(tmp_path)
    text = cli("run", folder, "--prompt", "t5 t17 t33 t2", "--prompt", "t1 t2", "--max-new-tokens", "5", "--device", "cpu")
    assert text.returncode == 0, text.stderr
    ids = cli("run", folder, "--prompt-ids", "5,17,33,2;1,2", "--max-new-tokens", "5", "--device", "cpu")
    assert ids.returncode == 0, ids.stderr

    def lines(r, what):
        return [l.split(":", 1)[1].split() for l in r.stdout.splitlines() if l.startswith(what)]

    assert lines(text, "prompt[") == [["5", "17", "33", "2"], ["1", "2"]]
    assert lines(text, "generated[") == lines(ids, "generated[")
    for b, row in enumerate(lines(text, "text[")):
        assert row == [f"t{t}" for t in lines(text, "prompt[")[b] + lines(text, "generated[")[b]]


def test_run_text_needs_a_tokenizer():
    """Without tokenizer.json, or without the tokenizers package, --prompt is
    refused with a message saying which, before the model loads."""
    try:
        import tokenizers  # noqa: F401
        want = "has none"
    except ImportError:
        want = "pip install tokenizers"
    r = cli("run", case_dir("base"), "--prompt", "t5")
    assert r.returncode == 2 and want in r.stderr and "loading" not in r.stderr, r.stderr


def test_run_text_errors(tmp_path):
    folder = with_tokenizer(tmp_path)
    r = cli("run", folder, "--prompt", "")
    assert r.returncode == 2 and "no tokens" in r.stderr
    r = cli("run", folder, "--prompt", "t1", "--prompt-ids", "1")
    assert r.returncode == 2 and "not allowed with" in r.stderr
    r = cli("run", folder)
    assert r.returncode == 2 and "one of the arguments --prompt-ids --prompt is required" in r.stderr


def test_run_text_fetches_a_hub_ids_tokenizer(monkeypatch, tmp_path):
    """For a Hub id the tokenizer.json comes through huggingface_hub, as the
    weights do (a stand-in module here: no network)."""
    import types

    from mambago.__main__ import _tokenizer

    folder = with_tokenizer(tmp_path)
    calls = []

    def snapshot_download(repo_id, allow_patterns, **options):
        calls.append((repo_id, allow_patterns, options))
        return folder

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert _tokenizer("org/mamba-tiny").encode("t5 t17").ids == [5, 17]
    assert calls == [("org/mamba-tiny", ["tokenizer.json"], {})]
    assert _tokenizer("org/mamba-tiny", "v2").encode("t5").ids == [5]
    assert calls[-1] == ("org/mamba-tiny", ["tokenizer.json"], {"revision": "v2"})
    with pytest.raises(ValueError, match="is not a checkpoint folder$"):
        _tokenizer(str(tmp_path / "no" / "such" / "folder"))


def test_revision_reaches_the_hub_download(monkeypatch, tmp_path):
    """--revision goes to the Hub download of a Hub id's weights and
    tokenizer (a stand-in huggingface_hub here: no network)."""
    import types

    from mambago.__main__ import main

    folder = with_tokenizer(tmp_path)
    calls = []

    def snapshot_download(repo_id, allow_patterns, **options):
        calls.append((repo_id, options))
        return folder

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(snapshot_download=snapshot_download))
    assert main(["run", "org/mamba-tiny", "--device", "cpu", "--revision", "v3", "--prompt", "t5 t17",
                 "--max-new-tokens", "2"]) == 0
    assert calls and all(c == ("org/mamba-tiny", {"revision": "v3"}) for c in calls), calls
    calls.clear()
    assert main(["info", "org/mamba-tiny", "--device", "cpu"]) == 0
    assert calls and all(c == ("org/mamba-tiny", {}) for c in calls), calls


def test_run_streams_one_texts_tokens(tmp_path):
    """One text prompt is printed as it is generated (generate's streamer):
    the line it ends with is the whole text, as a batch prints it at the end."""
    folder = with_tokenizer(tmp_path)
    one = cli("run", folder, "--prompt", "t5 t17 t33 t2", "--max-new-tokens", "7", "--device", "cpu")
    assert one.returncode == 0, one.stderr
    two = cli("run", folder, "--prompt", "t5 t17 t33 t2", "--prompt", "t5 t17 t33 t2", "--max-new-tokens", "7",
              "--device", "cpu")
    assert two.returncode == 0, two.stderr
    text = [l for l in one.stdout.splitlines() if l.startswith("text[0]:")]
    assert text == [l for l in two.stdout.splitlines() if l.startswith("text[0]:")]
    assert len(text[0].split()) == 1 + 4 + 7
    assert one.stdout.index("text[0]:") < one.stdout.index("prompt[0]:")  # printed during generate


def test_run_stops_at_stop_text(tmp_path):
    """--stop ends a row at the token that completes the text, as
    Model.generate's stop_strings do with the checkpoint's tokenizer.json (a
    byte-level BPE trained here); a tokenizer that cannot spell its tokens'
    texts (the word-level one above) is an error that says so."""
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    import mambago

    folder = tmp_path / "model"
    shutil.copytree(case_dir("base"), folder)
    m = mambago.Model.from_pretrained(str(folder), device="cpu")
    tk = tokenizers.Tokenizer(models.BPE())
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tk.train_from_iterator(["the quick brown fox jumps over the lazy dog; abcdef, stop"] * 20,
                           trainers.BpeTrainer(vocab_size=m.config.vocab_size, special_tokens=["<eos>"]))
    tk.save(str(folder / "tokenizer.json"))
    prompt = np.array([[5, 17, 33, 2]])
    free = m.generate(prompt, 10)
    stop = tk.decode(free[0, 3:5].tolist(), skip_special_tokens=False)
    want = m.generate(prompt, 10, eos_token_id=0, stop_strings=stop, tokenizer=tk)
    assert want.shape[1] <= 5
    r = cli("run", str(folder), "--prompt-ids", "5,17,33,2", "--max-new-tokens", "10", "--eos-token-id", "0",
            "--stop", stop, "--device", "cpu")
    assert r.returncode == 0, r.stderr
    got = [l.split(":")[1].split() for l in r.stdout.splitlines() if l.startswith("generated[0]")]
    assert got == [[str(t) for t in want[0]]], (stop, got, want)
    bad = cli("run", with_tokenizer(tmp_path), "--prompt-ids", "5,17", "--stop", "t5", "--device", "cpu")
    assert bad.returncode != 0 and "decodes no token's text" in bad.stderr, bad.stderr
