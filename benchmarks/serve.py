"""``anekit serve``: time to first token and tokens/s through the server vs in-process generate.

1. A random-init Llama (dim 512, 8 layers, 8 heads / 4 KV heads, hidden 1408, vocab
   4096, tied; ~29M parameters) saved in fp16 with a byte-level BPE tokenizer trained on
   CPython's pydoc topics (no download), on the reference backend, BLAS pinned to one
   thread in both processes.
2. In-process: ``session.stream`` of the loaded model; through the server: ``anekit serve``
   in a subprocess, the same prompt as token ids to ``/v1/completions`` with
   ``stream: true`` and ``ignore_eos`` over loopback (httpx), the clock read by the client:
   time to the first text chunk, then tokens/s over the rest. Rounds alternate between
   the two; medians. Target: the server's overhead at most 10% on both.
3. Aggregate tokens/s with 1, 2 and 4 concurrent streaming clients (one worker thread
   takes a token of each running request in turn; no batching: the aggregate cannot
   grow beyond one client's rate on one BLAS thread).

Run: ``python benchmarks/serve.py [--rounds R] [--tokens N] [--json FILE]``. The machine's
load (``uptime``) is printed beside the figures: other work on a shared machine moves them.
``--json benchmarks/results/serve.json`` records the figures that docs/serve.md quotes
(``make docs-check`` renders its table from that file).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CONFIG = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    vocab_size=4096,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
    initializer_range=0.02,
)
PROMPT_TOKENS = 64


def save_model(directory: Path) -> None:
    import pydoc_data.topics

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**CONFIG)).to(torch.float16).save_pretrained(directory)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=CONFIG["vocab_size"], special_tokens=["<eos>"],
                                  show_progress=False)  # fmt: skip
    tok.train_from_iterator(list(pydoc_data.topics.topics.values()), trainer=trainer)
    tok.save(str(directory / "tokenizer.json"))


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def in_process(session, ids: list[int], n: int) -> tuple[float, float]:
    """Time to first token and tokens/s after it, in this process."""
    begin = time.perf_counter()
    first = last = 0.0
    for i, _ in enumerate(session.stream(ids, n, stop=())):
        last = time.perf_counter()
        if i == 0:
            first = last
    return first - begin, (n - 1) / (last - first)


def through_server(http, url: str, ids: list[int], n: int) -> tuple[float, float, int]:
    """Time to first text, tokens/s after it, and the tokens the server counted (``http``: an
    httpx.Client kept open, as a real client keeps its connection; making one costs ~0.1 s)."""
    body = {"model": "bench", "prompt": ids, "max_tokens": n, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    begin = time.perf_counter()
    first = last = 0.0
    tokens = 0
    with http.stream("POST", url + "/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"][0]["text"]:
                last = time.perf_counter()
                first = first or last
    return first - begin, (n - 1) / (last - first), tokens


def aggregate(http, url: str, ids: list[int], n: int, clients: int) -> float:
    """Tokens/s of ``clients`` concurrent streams of ``n`` tokens each (all tokens / wall time)."""
    done: list[int] = []

    def one() -> None:
        done.append(through_server(http, url, ids, n)[2])

    threads = [threading.Thread(target=one) for _ in range(clients)]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.perf_counter() - begin)


def start_server(model: Path) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "anekit", "serve", "--model", str(model), "--port", "0",
            "--backend", "reference", "--max-sessions", "4", "--served-model-name", "bench",
            "--quiet", "--threads", "1"]  # fmt: skip
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    assert process.stderr is not None
    for line in process.stderr:
        if " on http://" in line:
            return process, line.split(" on ")[1].split("/v1")[0]
    raise RuntimeError("anekit serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()

    import httpx
    from threadpoolctl import threadpool_limits

    from anekit import fp16, llm

    fp16.use_torch()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1):
        model = Path(tmp)
        save_model(model)
        m = llm.load(model, backend="reference")
        ids = m.tokenizer.encode("def main():\n    " * 40)[:PROMPT_TOKENS]
        session = m.session()
        process, url = start_server(model)
        http = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=8))
        try:
            in_process(session, ids, 4), through_server(http, url, ids, 4)  # warm-up: compiles
            print(f"model: {m!r}; prompt {len(ids)} tokens, {args.tokens} new; BLAS 1 thread")
            before = load()
            print(f"load before: {before}")
            ours, served = [], []
            for _ in range(args.rounds):
                ours.append(in_process(session, ids, args.tokens))
                served.append(through_server(http, url, ids, args.tokens)[:2])
            ttft_in, ttft_srv = (statistics.median(x[0] for x in t) for t in (ours, served))
            tps_in, tps_srv = (statistics.median(x[1] for x in t) for t in (ours, served))
            print(f"time to first token: in-process {ttft_in * 1e3:.1f} ms, through the server "
                  f"{ttft_srv * 1e3:.1f} ms ({(ttft_srv / ttft_in - 1) * 100:+.1f}%)")  # fmt: skip
            print(f"decode tokens/s:     in-process {tps_in:.1f}, through the server "
                  f"{tps_srv:.1f} ({(tps_srv / tps_in - 1) * 100:+.1f}%)  (target: within 10%)")  # fmt: skip
            record = {
                "model": repr(m), "rounds": args.rounds, "prompt_tokens": len(ids),
                "new_tokens": args.tokens, "load_before": before,
                "ttft_ms": {"in_process": ttft_in * 1e3, "server": ttft_srv * 1e3},
                "decode_tokens_per_s": {"in_process": tps_in, "server": tps_srv},
                "aggregate_tokens_per_s": {},
            }  # fmt: skip
            for clients in (1, 2, 4):
                rounds = max(args.rounds // 2, 1)
                rates = [aggregate(http, url, ids, args.tokens, clients) for _ in range(rounds)]
                record["aggregate_tokens_per_s"][str(clients)] = statistics.median(rates)
                print(f"aggregate tokens/s, {clients} concurrent client(s): "
                      f"{statistics.median(rates):.1f}")  # fmt: skip
            record["load_after"] = load()
            print(f"load after: {record['load_after']}")
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(record, indent=1) + "\n")
        finally:
            http.close()
            process.terminate()
            process.wait(30)
            m.close()


if __name__ == "__main__":
    main()
