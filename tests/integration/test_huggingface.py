"""Hugging Face transformers and accelerate on flagos, unmodified: small randomly initialised
models (nothing downloaded) against the same models on CPU. Skipped where transformers (or, for
its tests, accelerate) is not installed; scripts/setup.sh installs both when it can."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

pytest.importorskip("transformers")
import transformers  # noqa: E402

import torch_fl  # noqa: E402

HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None
# The cpu accelerator runs the CPU kernels themselves: results are equal. On a GPU the kernels
# differ, so training compares with a tolerance and uses SGD (Adam turns a sign difference of a
# near-zero gradient into a whole learning-rate step).
EXACT = torch_fl.build_config.ACCELERATOR == "cpu"
TOL = {} if EXACT else {"rtol": 1e-4, "atol": 1e-5}
NEEDS_ACCELERATE = pytest.mark.skipif(not HAS_ACCELERATE, reason="needs accelerate")
VOCAB = 100


def gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def llama() -> torch.nn.Module:  # grouped-query attention through SDPA, rotary embeddings
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def bert() -> torch.nn.Module:
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return transformers.BertForMaskedLM(config)


def mixtral() -> torch.nn.Module:
    # Mixture of experts: off cpu and mps, transformers' expert routing counts tokens per expert
    # with histc on int32 ids, which CUDA's histc takes and CPU's refuses.
    config = transformers.MixtralConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        num_local_experts=4, num_experts_per_tok=2, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.MixtralForCausalLM(config)


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2": gpt2,
    "llama": llama,
    "bert": bert,
    "mixtral": mixtral,
}


def pair(make: Callable[[], torch.nn.Module]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights on CPU and on flagos."""
    torch.manual_seed(0)
    cpu = make()
    flagos = make()
    flagos.load_state_dict(cpu.state_dict())
    return cpu, flagos.to("flagos")


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", MODELS)
def test_training_steps_match_cpu(name, ids):
    cpu, flagos = pair(MODELS[name])
    make_opt = (
        (lambda p: torch.optim.AdamW(p, lr=1e-2))
        if EXACT
        else (lambda p: torch.optim.SGD(p, lr=0.1))
    )
    opts = [make_opt(m.parameters()) for m in (cpu, flagos)]
    for _ in range(2):
        losses = []
        for model, opt, x in ((cpu, opts[0], ids), (flagos, opts[1], ids.to("flagos"))):
            opt.zero_grad()
            out = model(input_ids=x, labels=x)
            out.loss.backward()
            opt.step()
            losses.append(out.loss.detach().cpu())
        torch.testing.assert_close(losses[1], losses[0], **TOL)
    for (n, p), q in zip(cpu.named_parameters(), flagos.parameters(), strict=True):
        assert q.device.type == "flagos", n
        torch.testing.assert_close(q.detach().cpu(), p.detach(), **TOL, msg=n)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_generation_with_the_kv_cache_matches_cpu(name, ids):
    """On CPU kernels (the cpu accelerator) against CPU; on a GPU, where near-ties of logits may
    break differently from CPU, against the same model on flagos without the cache."""
    cpu, flagos = pair(MODELS[name])
    prompt = ids[:, :4]
    kwargs = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0}
    if EXACT:
        expected = cpu.eval().generate(prompt, **kwargs)
    else:
        expected = flagos.eval().generate(prompt.to("flagos"), use_cache=False, **kwargs).cpu()
    got = flagos.eval().generate(prompt.to("flagos"), **kwargs)
    assert got.device.type == "flagos"
    assert torch.equal(got.cpu(), expected)


def test_save_pretrained_from_flagos_and_load_back(tmp_path, ids, two_devices):
    _, flagos = pair(llama)
    flagos.save_pretrained(tmp_path)
    # use_kernels=False keeps the `kernels` package from looking for CPU kernels on the Hub.
    loaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path, use_kernels=False)
    loaded = loaded.to("flagos:1")
    assert {p.device for p in loaded.parameters()} == {torch.device("flagos:1")}
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(ids.to("flagos:1")).logits.cpu(),
            flagos.eval()(ids.to("flagos")).logits.cpu(),
            **TOL,
        )


@NEEDS_ACCELERATE
@pytest.mark.parametrize(
    ("device_map", "dtype", "expected"),
    [
        ("flagos", torch.float32, "flagos:0"),
        ("flagos:1", torch.float32, "flagos:1"),
        ("auto", torch.bfloat16, "flagos:0"),  # accelerate finds the device via torch.accelerator
    ],
)
def test_from_pretrained_with_a_device_map(tmp_path, device_map, dtype, expected, two_devices):
    _, flagos = pair(llama)
    flagos.save_pretrained(tmp_path)
    # use_kernels=False: the `kernels` package transformers uses refuses device types it does
    # not list (docs/ecosystem.md).
    loaded = transformers.LlamaForCausalLM.from_pretrained(
        tmp_path, device_map=device_map, dtype=dtype, use_kernels=False
    )
    assert {(p.device, p.dtype) for p in loaded.parameters()} == {(torch.device(expected), dtype)}


@NEEDS_ACCELERATE
@pytest.mark.skipif(
    not EXACT, reason="with CUDA present, accelerate picks cuda, not the PrivateUse1 device"
)
def test_accelerate_trains_on_flagos(ids):
    from accelerate import Accelerator

    accelerator = Accelerator()
    assert accelerator.device == torch.device("flagos")
    cpu, model = pair(gpt2)
    model = model.cpu()  # accelerate moves it
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = accelerator.prepare(model, opt)
    assert next(model.parameters()).device.type == "flagos"
    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1)
    for _ in range(2):
        x = ids.to(accelerator.device)
        loss = model(input_ids=x, labels=x).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        cpu_loss = cpu(input_ids=ids, labels=ids).loss
        cpu_loss.backward()
        cpu_opt.step()
        cpu_opt.zero_grad()
        torch.testing.assert_close(loss.detach().cpu(), cpu_loss.detach(), **TOL)


def test_torch_compile_of_a_model_without_graph_breaks(ids):
    cpu, flagos = pair(llama)
    compiled = torch.compile(flagos.eval(), fullgraph=True)
    with torch.no_grad():
        got = compiled(ids.to("flagos")).logits
        expected = cpu.eval()(ids).logits
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_a_text_generation_pipeline_on_a_flagos_device(two_devices):
    """transformers.pipeline(device="flagos:1") with a tokenizer built in memory (a word-level
    vocabulary, nothing downloaded) runs on flagos:1 and, on CPU kernels, generates what the
    same pipeline generates on CPU."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(VOCAB)}
    words = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="w0", pad_token="w0", eos_token="w0"
    )
    cpu, flagos = pair(llama)
    kwargs = {"max_new_tokens": 6, "do_sample": False}
    texts = []
    for model, device in ((cpu, "cpu"), (flagos, "flagos:1")):
        pipe = transformers.pipeline(
            "text-generation", model=model, tokenizer=tokenizer, device=device
        )
        assert pipe.device == torch.device(device)
        texts.append(pipe("w5 w7 w9", **kwargs)[0]["generated_text"])
    assert next(flagos.parameters()).device == torch.device("flagos:1")
    assert texts[1].startswith("w5 w7 w9") and len(texts[1].split()) >= 3 + 1
    if EXACT:  # on a GPU near-tied logits may break differently from CPU
        assert texts[1] == texts[0]
