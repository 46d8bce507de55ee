"""Trained attnbench checkpoints as an lm-eval model, registered as ``attnbench``.

    lm-eval --model attnbench --model_args checkpoint=results/checkpoints/KEY.pt ...
    lm-eval --model attnbench --model_args store=results/attnbench.sqlite,run=12 ...

(through ``attnbench lm-eval``, which imports this module so lm-eval finds the model).
Text is read with the checkpoint's tokenizer: UTF-8 bytes, or the BPE it was trained with
(kept in the checkpoint). Scoring is exact next-token
log-likelihood in fp32 (bf16 autocast for the matmuls on CUDA only):

* ``loglikelihood``: log p(continuation | context) with ``is_greedy`` true when every
  continuation byte is the argmax; an empty context is conditioned on the prefix byte.
* ``loglikelihood_rolling``: lm-eval's standard disjoint windows (``get_rolling_token_windows``
  with one token of context, then ``make_disjoint_window``): every byte is scored exactly
  once, the first one given the prefix byte, and no window is longer than the model context.
* A document longer than the model reads (``length_limit``: the context for learned positions)
  is refused, naming the task and the fix; with ``truncate=left`` it is scored on its last
  tokens and counted in the results' ``config.attnbench.truncated`` (``reach.py``).
* ``generate_until``: greedy (or sampled) decoding through the model's incremental state
  (``init_state``/``step``), stopping at any ``until`` string or after ``max_gen_toks`` bytes.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import lm_eval.models  # noqa: F401  (lm-eval fills its built-in models only while its registry is empty)
import torch
import torch.nn.functional as F
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from attnbench.data.tokenizers import ByteTokenizer, tokenizer_kind
from attnbench.errors import CheckpointError, ModelArgsError
from attnbench.experiments.lm_eval.reach import Reach, truncate_mode
from attnbench.nn.checkpoint import CheckpointMeta, find_run, load_checkpoint, run_checkpoint
from attnbench.nn.model import LanguageModel
from attnbench.nn.precision import autocast_for
from attnbench.store.database import Store

log = logging.getLogger(__name__)
DEFAULT_MAX_GEN_TOKS = 256

# model_args, as `attnbench lm-eval --help` lists them (lm-eval's --batch_size, --max_batch_size
# and --device fill in the ones model_args leaves out).
MODEL_ARGS = {
    "checkpoint": "a '<cell key>.pt' checkpoint file of a trained cell",
    "store": "a results store (with run=) to take the checkpoint of a stored train run from",
    "run": "that run's id or cell key (8+ characters)",
    "device": "cpu, cuda, cuda:N (default: cuda when available)",
    "batch_size": "sequences scored per forward pass (default 16; wins over lm-eval's --batch_size)",
    "max_batch_size": "accepted for lm-eval's --max_batch_size; unused",
    "prefix_token": "token id the first token of a document is conditioned on (default: newline)",
    "max_gen_toks": f"most tokens generate_until writes (default {DEFAULT_MAX_GEN_TOKS})",
    "truncate": "left: score a document longer than the model reads on its last tokens, counted in "
    "the results; none (default): refuse it",
}


def resolve_device(requested: str | None) -> torch.device:
    """The device asked for, or CPU (with a warning) when it is a CUDA device that is absent."""
    if requested in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.warning("device %s requested but CUDA is not available; evaluating on cpu", requested)
        return torch.device("cpu")
    return device


def _reject_unknown(given: dict[str, Any]) -> None:
    import difflib

    unknown = sorted(set(given) - set(MODEL_ARGS))
    if unknown:
        hints = [
            f"{u!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(u, list(MODEL_ARGS), 1)) else repr(u)
            for u in unknown
        ]
        raise ModelArgsError(f"unknown attnbench model_args {', '.join(hints)}; accepted: {', '.join(MODEL_ARGS)}")


def _merged(args: dict[str, Any], additional_config: dict[str, Any] | None) -> dict[str, Any]:
    """model_args, then lm-eval's --batch_size/--max_batch_size/--device where model_args has none
    (lm-eval's own classmethods pass both and fail on a repeated keyword)."""
    _reject_unknown(args)
    extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k in MODEL_ARGS}
    for name in sorted(extra.keys() & args.keys()):
        if str(extra[name]) != str(args[name]):
            log.info("model_args %s=%s is used; lm-eval's --%s %s is not", name, args[name], name, extra[name])
    return {**extra, **args}


def _batch_size(value: Any) -> int:
    if isinstance(value, str) and value.startswith("auto"):
        log.warning("batch_size=%s: automatic batch sizing is not supported; using 16", value)
        return 16
    size = int(value)
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {value}")
    return size


def chunk_targets(tokens: list[int], first: int, context: int) -> list[tuple[list[int], int]]:
    """Windows scoring tokens[first:] with at most ``context`` inputs each: (window tokens,
    number of scored targets at its end). Each window carries as much preceding context as
    fits. Needs first >= 1 (the first token of a sequence has nothing to condition on)."""
    out = []
    for start in range(first, len(tokens), context):
        end = min(start + context, len(tokens))
        out.append((tokens[max(0, end - context - 1) : end], end - start))
    return out


class AttnbenchLM(LM):
    """An attnbench model behind lm-eval's ``LM`` interface (see the module docstring).

    model_args: see ``MODEL_ARGS`` (``checkpoint=PATH`` or ``store=PATH,run=ID``); unknown
    ones are refused with the accepted list.
    """

    def __init__(
        self,
        checkpoint: str | None = None,
        store: str | None = None,
        run: str | int | None = None,
        device: str | None = None,
        batch_size: int | str = 16,
        max_batch_size: int | None = None,
        prefix_token: int | str | None = None,
        max_gen_toks: int | str = DEFAULT_MAX_GEN_TOKS,
        truncate: str | None = None,
        model: LanguageModel | None = None,
        info: dict[str, Any] | None = None,
        tokenizer_json: str | None = None,
        **unknown: Any,
    ) -> None:
        super().__init__()
        _reject_unknown(unknown)
        if model is None:
            model, meta = _load(checkpoint, store, run)
            info = {**_meta_info(meta), **(info or {})}
            tokenizer_json = meta.tokenizer
        self._device = resolve_device(device)
        self.model = model.to(self._device).eval()
        self.context = int(model.config.context)
        self.tokenizer = _tokenizer(tokenizer_json, model.config.vocab_size)
        self.batch_size = _batch_size(batch_size)
        self.prefix_token = _prefix(prefix_token, tokenizer_json, model.config.vocab_size)
        self.max_gen_toks = int(max_gen_toks)
        limit = model.length_limit()
        self.reach = Reach(*(limit or (None, "")), truncate=truncate_mode(truncate))
        self.info = {
            **(info or {}),
            "context": self.context,
            "device": str(self._device),
            "batch_size": self.batch_size,
            "prefix_token": self.prefix_token,
            "tokenizer": tokenizer_kind(tokenizer_json),
        }
        self._warned_no_step = False

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict[str, Any] | None = None) -> AttnbenchLM:
        """model_args as text (``checkpoint=PATH,batch_size=8``); see ``_merged``."""
        from lm_eval.utils import simple_parse_args_string

        return cls(**_merged(simple_parse_args_string(arg_string or ""), additional_config))

    @classmethod
    def create_from_arg_obj(
        cls, arg_dict: dict[str, Any], additional_config: dict[str, Any] | None = None
    ) -> AttnbenchLM:
        """model_args as a dict (lm-eval's command line parses --model_args into one); see ``_merged``."""
        return cls(**_merged(dict(arg_dict or {}), additional_config))

    @classmethod
    def from_model(cls, model: LanguageModel, **kwargs: Any) -> AttnbenchLM:
        """Wrap a model already in memory (tests, notebooks) instead of a checkpoint."""
        return cls(model=model, **kwargs)

    def get_model_info(self) -> dict[str, Any]:
        """Recorded by lm-eval in its results' ``config`` (after scoring: with the documents cut)."""
        truncated = self.reach.truncated()
        return {
            "attnbench": {
                **self.info,
                "truncate": self.reach.truncate,
                **({"truncated": truncated} if truncated else {}),
            }
        }

    # -- scoring -----------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).tolist() if text else []

    @torch.no_grad()
    def score_windows(self, items: list[tuple[list[int], int]]) -> list[tuple[float, bool]]:
        """(window tokens, n) -> (sum of log p of the last n tokens, all of them argmax).

        Windows with the same inputs (a multiple-choice question's one-token answers) share one
        row. Rows are sorted by length and right-padded into batches: the model is causal, so
        padding after a row's last input never changes that row's scored logits.
        """
        results: list[tuple[float, bool]] = [(0.0, True)] * len(items)
        readers: dict[tuple[int, ...], list[int]] = {}  # input tokens -> the windows scored on them
        for i, (toks, _) in enumerate(items):
            readers.setdefault(tuple(toks[:-1]), []).append(i)
        rows = sorted(readers, key=len, reverse=True)
        for b in range(0, len(rows), self.batch_size):
            batch = rows[b : b + self.batch_size]
            inp = torch.zeros(len(batch), len(batch[0]), dtype=torch.long)  # (B, L) right-padded inputs
            for row, tokens in enumerate(batch):
                inp[row, : len(tokens)] = torch.tensor(tokens)
            inp = inp.to(self._device)
            with autocast_for(self._device):
                logits = self.model(inp).logits  # (B, L, V)
            logp = F.log_softmax(logits.float(), dim=-1)  # (B, L, V) fp32: exact sums of many bytes
            for row, tokens in enumerate(batch):
                for i in readers[tokens]:
                    toks, n = items[i]
                    target = torch.tensor(toks[-n:], device=self._device)  # (n,)
                    lp = logp[row, len(tokens) - n : len(tokens)]  # (n, V) the positions predicting the targets
                    results[i] = (lp.gather(-1, target[:, None]).sum().item(), bool((lp.argmax(-1) == target).all()))
        return results

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        items: list[tuple[list[int], int]] = []
        owner: list[int] = []
        encoded = []
        for req in requests:
            context, continuation = req.args
            encoded.append((self._encode(context) or [self.prefix_token], self._encode(continuation)))
        self._admit(requests, [len(ctx) + len(cont) - 1 for ctx, cont in encoded])
        for r, (ctx, cont) in enumerate(encoded):
            reach = self.reach.limit or len(ctx) + len(cont)  # no limit: the whole document in one window
            for window in chunk_targets(ctx + cont, len(ctx), reach):
                items.append(window)
                owner.append(r)
        scored = self.score_windows(items)
        out = [(0.0, True)] * len(requests)
        for r, (lp, greedy) in zip(owner, scored, strict=True):
            out[r] = (out[r][0] + lp, out[r][1] and greedy)
        for req, res in zip(requests, out, strict=True):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return out

    def rolling_windows(self, text: str) -> list[tuple[list[int], int]]:
        """lm-eval's standard disjoint windows over a document, as (tokens, n scored)."""
        windows = get_rolling_token_windows(self._encode(text), self.prefix_token, self.context, 1)
        return [(ctx + pred, len(pred)) for ctx, pred in map(make_disjoint_window, windows)]

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        items: list[tuple[list[int], int]] = []
        owner: list[int] = []
        for r, req in enumerate(requests):
            for window in self.rolling_windows(req.args[0]):
                items.append(window)
                owner.append(r)
        totals = [0.0] * len(requests)
        for r, (lp, _) in zip(owner, self.score_windows(items), strict=True):
            totals[r] += lp
        for req, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def _admit(self, requests: list[Any], needs: list[int]) -> None:
        """Refuse documents the model cannot read whole, or count the ones cut (``Reach``)."""
        before = {task: len(docs) for task, docs in self.reach.cut.items()}
        self.reach.admit(requests, needs)
        for task, line in self.reach.truncated().items():
            if len(self.reach.cut[task]) != before.get(task, 0):
                log.warning("task %s: %s (truncate=left)", task, line)

    # -- generation --------------------------------------------------------------------
    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        from attnbench.experiments.lm_eval.generate import GenSettings, generate_batch

        out: list[str | None] = [None] * len(requests)
        groups: dict[tuple[int, str], list[int]] = {}
        prompts, settings = [], []
        reach = self.reach.limit or sys.maxsize
        for req in requests:
            context, kwargs = req.args
            settings.append(GenSettings.from_kwargs(kwargs, self.max_gen_toks, reach))
            prompts.append(self._encode(context) or [self.prefix_token])
        self._admit(requests, [len(p) + s.max_new for p, s in zip(prompts, settings, strict=True)])
        for r, s in enumerate(settings):
            prompt = prompts[r] = prompts[r][-(reach - s.max_new) :]
            groups.setdefault((len(prompt), json.dumps(s.key())), []).append(r)
        decode = None if isinstance(self.tokenizer, ByteTokenizer) else self.tokenizer.decode
        for members in groups.values():
            for b in range(0, len(members), self.batch_size):
                idx = members[b : b + self.batch_size]
                texts, incremental = generate_batch(
                    self.model, self._device, [prompts[i] for i in idx], settings[idx[0]], decode
                )
                if not incremental and not self._warned_no_step:
                    log.warning(
                        "this model has no incremental decoding: generate_until re-runs the "
                        "whole prefix for every generated byte (quadratic in length)"
                    )
                    self._warned_no_step = True
                for i, text in zip(idx, texts, strict=True):
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
        return [o or "" for o in out]


# Registered by a call, not as a decorator: lm-eval's untyped decorator would hide the class's own signature.
register_model("attnbench")(AttnbenchLM)


def _tokenizer(tokenizer_json: str | None, vocab_size: int) -> Any:
    """The checkpoint's tokenizer: bytes, a token-id task's ids, or its trained tokenizer.json."""
    if tokenizer_json is None:
        if vocab_size != ByteTokenizer.vocab_size:
            raise CheckpointError(
                f"the model embeds {vocab_size} tokens but its checkpoint keeps no tokenizer, so its text "
                "encoding is unknown; re-train it with this version of attnbench (checkpoints now keep it)"
            )
        return ByteTokenizer()
    from attnbench.data.tokenizers import TokenIdsTokenizer, token_ids_vocab

    ids_vocab = token_ids_vocab(tokenizer_json)
    tok = (
        _trained_tokenizer(tokenizer_json) if ids_vocab is None else TokenIdsTokenizer(ids_vocab)
    )  # text that is not ids is refused by name
    if tok.vocab_size > vocab_size:
        raise CheckpointError(f"the checkpoint's tokenizer has {tok.vocab_size} tokens, the model embeds {vocab_size}")
    return tok


def _trained_tokenizer(tokenizer_json: str) -> Any:
    """A checkpoint's trained tokenizer.json, read with HF ``tokenizers`` (the ``bpe`` extra)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CheckpointError(
            "this checkpoint keeps a trained tokenizer, which needs the `tokenizers` package: "
            "pip install 'attnbench[bpe]' -c constraints.txt"
        ) from None
    from attnbench.data.tokenizers import HFTokenizer

    return HFTokenizer(Tokenizer.from_str(tokenizer_json), "checkpoint")


def _prefix(value: int | str | None, tokenizer_json: str | None, vocab_size: int) -> int:
    from attnbench.export.tokenizer import prefix_token_id

    try:
        token = prefix_token_id(tokenizer_json) if value is None else int(value)
    except ValueError as exc:
        raise ModelArgsError(str(exc)) from None
    if not 0 <= token < vocab_size:
        raise ModelArgsError(f"prefix_token must be a token id in [0, {vocab_size - 1}], got {value}")
    return token


def _load(checkpoint: str | None, store: str | None, run: str | int | None) -> tuple[LanguageModel, CheckpointMeta]:
    from attnbench.registry.loader import load_registry

    if checkpoint and (store or run is not None):
        raise CheckpointError("give either checkpoint=PATH or store=PATH,run=ID in model_args, not both")
    if not checkpoint:
        if not store or run is None:
            raise CheckpointError(
                "the attnbench model needs model_args checkpoint=PATH (a '<cell key>.pt' file) "
                "or store=PATH,run=ID (a trained run in a results store), e.g. "
                "--model_args checkpoint=results/checkpoints/KEY.pt,batch_size=8"
            )
        if not Path(store).is_file():
            raise CheckpointError(f"results store {store} does not exist; pass the store the run was trained into")
        with Store(store) as st:
            checkpoint = str(run_checkpoint(st, find_run(st, run)))
    return load_checkpoint(checkpoint, load_registry())


def _meta_info(meta: CheckpointMeta) -> dict[str, Any]:
    return {
        "variant": meta.variant,
        "checkpoint": meta.path,
        "cell_key": meta.cell_key,
        "step": meta.step,
        "model_kind": meta.model_kind,
        "n_params": meta.n_params,
    }
