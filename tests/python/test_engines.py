# SPDX-License-Identifier: Apache-2.0
"""attnref.engines: the engine compatibility matrix from a config.json (dict or path) or from
fields, the same as attnref-run engines --json, and its errors."""
import json
import os
import pathlib
import subprocess

import pytest

import attnref

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "configs"


def verdicts(matrix):
    return {k["kernel"]: k["verdict"] for k in matrix["kernels"]}


def test_a_config_dict_gives_every_kernel_its_verdict():
    qwen = json.loads((CONFIGS / "qwen2-7b.json").read_text())
    m = attnref.engines(qwen, arch="sm90")
    assert m["arch"] == "sm90"
    assert m["config"]["num_q_heads"] == 28 and m["config"]["num_kv_heads"] == 4
    v = verdicts(m)
    assert len(v) == 15
    assert v["flashinfer.decode"] == "rejects"
    assert v["flash_attn4"] == "accepts"
    assert v["flashinfer.decode.tensor_cores"] == "accepts"
    assert v["flash_attn2"] == "rejects"
    decode = m["kernels"][0]
    assert decode["findings"][0]["upstream"] == "Unsupported group_size: 7"
    assert decode["findings"][0]["severity"] == "rejects"
    assert decode["nearest"]["changes"][0]["text"] == "num_kv_heads 4 -> 7"
    assert "sliding_window 131072 is off (use_sliding_window is false)" in m["notes"]


def test_a_path_and_fields_and_dtype_overrides():
    oss = attnref.engines(CONFIGS / "gpt-oss-20b.json", arch="sm90")
    assert verdicts(oss)["vllm.flash_attn"] == "accepts"
    assert verdicts(oss)["flashinfer.decode"] == "hazard"  # sinks dropped
    fp8 = attnref.engines(str(CONFIGS / "gpt-oss-20b.json"), arch="sm89", kv_dtype="float8_e4m3fn")
    assert fp8["config"]["kv_dtype"] == "float8_e4m3fn"
    assert verdicts(fp8)["vllm.flash_attn"] == "rejects"
    assert verdicts(fp8)["vllm.triton_attn"] == "accepts"  # sinks, and fp8 K/V from sm89 on
    assert {k["kernel"]: k["version"] for k in fp8["kernels"]}["vllm.triton_attn"] == "vllm 0.33.0"
    old = attnref.engines(str(CONFIGS / "gpt-oss-20b.json"), arch="sm89",
                          kv_dtype="float8_e4m3fn", engine_version="vllm=0.32.0")
    assert {k["kernel"]: k["version"] for k in old["kernels"]}["vllm.triton_attn"] == "vllm 0.32.0"
    assert verdicts(old)["vllm.triton_attn"] == "accepts"
    with pytest.raises(attnref.ShapeError):
        attnref.engines(str(CONFIGS / "gpt-oss-20b.json"), engine_version="vllm")
    fields = attnref.engines(num_q_heads=128, num_kv_heads=1, head_dim=576, head_dim_v=512,
                             page_size=64, arch="sm90")
    assert verdicts(fields)["flashmla.decode"] == "accepts"
    assert verdicts(fields)["flash_attn2"] == "rejects"


def test_vllms_mla_backends_are_listed_for_an_mla_layer_only():
    # DeepSeek-V3 (a 512 + 64 latent, one KV head) on pages of 64.
    sm90 = verdicts(attnref.engines(CONFIGS / "deepseek-v3.json", arch="sm90", page_size=64))
    assert len(sm90) == 20
    assert sm90["vllm.flashmla"] == "accepts" and sm90["vllm.triton_mla"] == "accepts"
    assert sm90["vllm.cutlass_mla"] == "rejects" and sm90["vllm.flashinfer_mla"] == "rejects"
    assert sm90["vllm.flash_attn"] == "rejects"  # "MLA not supported"
    sm100 = attnref.engines(CONFIGS / "deepseek-v3.json", arch="sm100", page_size=128)
    assert verdicts(sm100)["vllm.cutlass_mla"] == "accepts"
    flashmla = next(k for k in sm100["kernels"] if k["kernel"] == "vllm.flashmla")
    assert [f["upstream"] for f in flashmla["findings"]] == [
        "FlashMLA Dense is only supported on Hopper devices."]
    assert flashmla["version"] == "vllm 0.33.0"
    # FlashAttention-4 on sm100 takes (192, 128) for DeepSeek's prefill, not its latent decode.
    fa4 = next(k for k in sm100["kernels"] if k["kernel"] == "flash_attn4")
    assert fa4["version"] == "vllm 0.33.0" and fa4["verdict"] == "rejects"
    assert [f["id"] for f in fa4["findings"]] == ["flash_attn4.head_dims_sm100"]
    llama = verdicts(attnref.engines(CONFIGS / "llama-3-8b.json", arch="sm100"))
    assert "vllm.flashmla" not in llama and "vllm.cutlass_mla" not in llama


@pytest.mark.skipif(not os.environ.get("ATTNREF_RUN"), reason="attnref-run is not built")
def test_python_and_attnref_run_give_the_same_matrix():
    path = CONFIGS / "deepseek-v3.json"
    cli = subprocess.run([os.environ["ATTNREF_RUN"], "engines", "--hf-config", str(path),
                          "--page-size", "64", "--arch", "sm90", "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(cli.stdout) == attnref.engines(path, arch="sm90", page_size=64)


def test_bad_input_gets_a_clear_error():
    with pytest.raises(attnref.ShapeError) as e:
        attnref.engines(num_q_heads=32, num_kv_heads=8, head_dim=128, arch="sm75")
    assert e.value.code == "unknown_engine_target"
    assert e.value.hint == "known architectures: sm80, sm86, sm89, sm90, sm100, sm120"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.engines({"num_attention_heads": 32, "head_dim": 128})
    assert e.value.code == "bad_file"
    assert e.value.message == "config.json has no torch_dtype."
    with pytest.raises(attnref.ShapeError) as e:
        attnref.engines(num_q_heads=32, head_dim=128)
    assert e.value.code == "invalid_head_count"
    with pytest.raises(ValueError, match="give a config.json or the fields, not both"):
        attnref.engines({"num_attention_heads": 32}, num_q_heads=32)
    with pytest.raises(ValueError, match="dtype must be one of"):
        attnref.engines(num_q_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16")
    with pytest.raises(ValueError, match="cannot read"):
        attnref.engines("/nonexistent/config.json")
    with pytest.raises(TypeError):
        attnref.engines(num_q_heads=32, num_kv_heads=8, head_dim=128, window=4)
