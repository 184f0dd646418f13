"""task=sft: instruction tuning of the decoders. Prompt tokens carry no target and response tokens
their ids, in each of the three row shapes; a Hugging Face folder's chat template is the one used;
``zoo generate chat=true`` formats a prompt as training did; impossible pairs are refused; a tiny
model=qwen3 run on GSM8K-format rows learns its responses, is evaluated by ``zoo eval`` and trains
under LoRA."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import assert_refused_in_one_line, run_train
from zoo.config import compose_config
from zoo.data.batches import IGNORE
from zoo.data.instructions import Instructions, chat_prompt_ids, example, render

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
QA = [{"question": f"What is {a} plus {b}?", "answer": f"{a} plus {b} is {a + b}.\n#### {a + b}"}
      for a in range(1, 9) for b in range(1, 9)]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_gsm8k(data: Path) -> None:
    """GSM8K's layout under a data folder: downstream/gsm8k/{train,test}.jsonl of short sums."""
    write_rows(data / "downstream" / "gsm8k" / "train.jsonl", QA)
    write_rows(data / "downstream" / "gsm8k" / "test.jsonl", QA[:16])


def write_gpteacher(data: Path) -> None:
    """GPTeacher Codegen's layout: one JSON list of {instruction, input, response}."""
    rows = [{"instruction": f"Print {a}", "input": "" if a % 2 else "in Python", "response": f"print({a})"}
            for a in range(40)]
    folder = data / "downstream" / "gpteacher_codegen"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "codegen-instruct.json").write_text(json.dumps(rows, indent=4))


def instructions(tmp_path: Path, source: Path, **kwargs) -> Instructions:
    data = Instructions(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=kwargs.pop("block_size", 96),
                        source=str(source), vocab_size=kwargs.pop("vocab_size", 320), **kwargs)
    data.setup()
    return data


def response_text(data: Instructions, targets: list[int]) -> str:
    """The targets that carry a loss, decoded with their special tokens."""
    return data.tokenizer.tokenizer.decode([t for t in targets if t != IGNORE], skip_special_tokens=False)


def test_prompt_tokens_have_no_target_and_response_tokens_their_ids(tmp_path):
    """GSM8K rows under the alpaca default: every target before the response is -100, then the
    targets are the response's ids and the end-of-text token, each the input that follows."""
    data = instructions(tmp_path, write_rows(tmp_path / "train.jsonl", QA))
    tok = data.tokenizer
    for inputs, targets in data.splits["train"]:
        prompt = tok.decode(inputs).split("### Response:\n")[0] + "### Response:\n"
        n_prompt = len(tok.encode(prompt))
        assert targets[: n_prompt - 1] == [IGNORE] * (n_prompt - 1)
        assert IGNORE not in targets[n_prompt - 1:]
        assert targets[:-1][n_prompt - 1:] == inputs[n_prompt:]  # each target the next input
        row = next(r for r in QA if r["question"] in tok.decode(inputs))
        assert targets[n_prompt - 1:] == tok.encode(row["answer"] + "<|endoftext|>")
    batch = data.collate_fn()([data.splits["train"][i] for i in range(2)])
    assert batch.inputs.shape == batch.targets.shape and (batch.targets != IGNORE).any()


@pytest.mark.parametrize("rows, given, answers", [
    ([{"instruction": "Add", "input": "2 and 3", "output": "5"}] * 4, None, "5"),
    ([{"instruction": "Write hello", "input": "", "response": "print('hello')"}] * 4, None, "print('hello')"),
    ([{"question": "2 + 3?", "answer": "5", "instruction": "unused"}] * 4, "question", "5"),
    ([{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"},
                    {"role": "assistant", "content": "Goodbye"}]}] * 4, None, "HelloGoodbye"),
])
def test_each_row_shape_trains_on_its_responses_only(tmp_path, rows, given, answers):
    """instruction (+ input) -> output or response, question -> answer, chat messages: only the
    assistant's turns (each closed by its end-of-text token) carry targets."""
    data = instructions(tmp_path, write_rows(tmp_path / "rows.jsonl", rows), format=given, val_fraction=0.25,
                        test_fraction=0.25)
    inputs, targets = data.splits["train"][0]
    assert response_text(data, targets).replace("<|endoftext|>", "") == answers
    prompt = data.tokenizer.decode(inputs)
    for user in ("2 and 3", "Write hello", "2 + 3?", "Be brief.", "Bye"):
        if user in json.dumps(rows[0]):
            assert user in prompt and user not in response_text(data, targets)


def test_a_folders_chat_template_is_used_and_travels_with_the_tokenizer(tmp_path):
    """data.tokenizer= a Hugging Face folder with a chat_template: conversations are formatted by it
    (the response spans its closing tokens), and the tokenizer's state carries it (zoo eval, generate)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<|im_start|>", "<|im_end|>", "user", "assistant", "\n", "Hi", "Hello", "Bye", "Goodbye"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("\n"), behavior="isolated")
    folder = tmp_path / "tok"
    PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=CHATML, eos_token="<|im_end|>",
                            additional_special_tokens=["<|im_start|>"]).save_pretrained(folder)
    rows = [{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                          {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye"}]}] * 4
    data = instructions(tmp_path, write_rows(tmp_path / "chat.jsonl", rows), tokenizer=str(folder),
                        val_fraction=0.25, test_fraction=0.25)
    assert data.tokenizer.chat_template == CHATML and data.tokenizer.state()["chat_template"] == CHATML
    inputs, targets = data.splits["train"][0]
    token = data.tokenizer.tokenizer.id_to_token
    assert [token(t) for t in targets if t != IGNORE] == ["Hello", "<|im_end|>", "\n", "Goodbye", "<|im_end|>", "\n"]
    assert [token(i) for i in inputs[:8]] == ["<|im_start|>", "user", "\n", "Hi", "<|im_end|>", "\n", "<|im_start|>",
                                              "assistant"]
    assert targets[:8] == [IGNORE] * 8 and targets[8] == inputs[9]  # "assistant\n" is the prompt's end


@pytest.mark.parametrize("template, prompt_end", [("alpaca", "### Response:\n"), ("plain", "\nassistant:")])
def test_generate_chat_formats_a_prompt_as_the_training_rows(tmp_path, template, prompt_end):
    """chat_prompt_ids (zoo generate chat=true, the run's sample) is what training fed before a
    response, the response starting a token (the named templates' prompts end between tokens)."""
    data = instructions(tmp_path, write_rows(tmp_path / "train.jsonl", QA), template=template)
    messages = [{"role": "user", "content": QA[5]["question"]}, {"role": "assistant", "content": QA[5]["answer"]}]
    ids, response = example(data.tokenizer, messages)
    prompt = chat_prompt_ids(data.tokenizer, QA[5]["question"])
    assert ids[: len(prompt)] == prompt and not any(response[: len(prompt)]) and all(response[len(prompt):])
    assert data.tokenizer.decode(prompt).endswith(prompt_end)
    assert data.tokenizer.decode(ids[len(prompt):]).strip() == QA[5]["answer"]
    assert render(data.tokenizer.chat_template, data.tokenizer.roles, messages[:1], True) in data.tokenizer.decode(ids)


@pytest.mark.parametrize("setting, named", [({"pack": True}, "data.pack=true"),
                                            ({"format": "chat"}, "data.format=chat"),
                                            ({"template": "vicuna"}, "data.template=vicuna")])
def test_bad_settings_are_refused_in_one_line(tmp_path, setting, named):
    with pytest.raises(ValueError) as refused:
        Instructions(str(tmp_path), str(tmp_path / "cache"), 2, 64, source="x.jsonl", **setting)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_rows_of_no_known_shape_are_refused_naming_their_columns(tmp_path):
    with pytest.raises(ValueError, match=r"columns \['prompt', 'completion'\]"):
        instructions(tmp_path, write_rows(tmp_path / "rows.jsonl", [{"prompt": "a", "completion": "b"}] * 4))


def test_task_sft_keeps_the_decoder_and_pretrain_is_unchanged():
    """task=sft is the family's next-token LM with a chat sample; the network is the same."""
    pretrain, sft = (compose_config(["model=qwen3", *task]).model for task in ([], ["task=sft"]))
    assert sft._target_ == pretrain._target_ == "zoo.objectives.lm.NextTokenLM"
    assert sft.sample_chat and "sample_chat" not in pretrain
    assert OmegaConf.to_container(sft.net) == OmegaConf.to_container(pretrain.net)
    assert compose_config(["model=gpt", "task=sft"]).model.sample_chat  # after gpt.yaml's own sample settings


@pytest.mark.parametrize("arguments, named", [
    (["model=bert", "task=sft", "data=gsm8k"], ["task=sft", "model=bert", "NextTokenLM", "decoder family"]),
    (["model=vit", "task=sft", "data=gsm8k"],
     ["task=sft", "model=vit", "Classification", "ImageLabels", "NextTokenLM"]),
    (["model=t5", "task=sft", "data=gsm8k"], ["task=sft", "model=t5", "decoder family"]),
])
def test_impossible_pairs_are_refused_in_one_line_naming_both_sides(arguments, named, tmp_path):
    assert_refused_in_one_line(arguments, named, tmp_path / "run")


TINY_QWEN3 = ["model.net.n_layers=2", "model.net.block.d_model=64", "data.vocab_size=400", "data.batch_size=8",
              "trainer.log_every_n_steps=1", "model.sample_tokens=10", "quick=true"]


def zoo(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    root = str(Path(__file__).parents[1])
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "zoo", *arguments], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


@pytest.mark.slow
def test_qwen3_sft_on_gsm8k_learns_its_responses_and_zoo_eval_reports_them(tmp_path):
    """python train.py model=qwen3 task=sft data=gsm8k on GSM8K-format rows: the response-token loss
    falls; zoo eval reports it on the test split; zoo generate chat=true answers a question in the
    template; the run trains on under LoRA (model.lora=) from its checkpoint."""
    write_gsm8k(tmp_path / "data")
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=qwen3", "task=sft", "data=gsm8k", "trainer.max_steps=40", *TINY_QWEN3)
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 40 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    assert "### Response:" in (run / "samples.txt").read_text()
    ckpt = run / "checkpoints" / "last.ckpt"
    zoo(tmp_path, "eval", f"ckpt={ckpt}", "data=gsm8k", f"out={tmp_path / 'eval.json'}")
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert 0 < metrics["loss"] < losses[0], metrics
    out = zoo(tmp_path, "generate", f"ckpt={ckpt}", "prompt=What is 3 plus 4?", "chat=true", "max_new_tokens=8")
    assert "### Instruction:\nWhat is 3 plus 4?\n\n### Response:\n" in out.stdout
    lora = tmp_path / "lora"
    run_train(lora, tmp_path / "data", "model=qwen3", "task=sft", "data=gsm8k", "trainer.max_steps=4", *TINY_QWEN3,
              f"model.init_from={ckpt}", "model.lora={r: 4, alpha: 8, targets: [q, v]}")
    assert "LoRA" in (lora / "train.log").read_text()


def test_task_sft_on_data_without_prompts_is_refused():
    """task=sft over data=text (a char tokenizer, no chat template) is refused as the model is built."""
    from hydra.errors import InstantiationException
    from omegaconf import open_dict

    from zoo.data.tokenizers import CharTokenizer
    from zoo.train.run import objective

    cfg = compose_config(["model=qwen3", "task=sft", "data=text", "model.net.n_layers=1"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": 40}
    with pytest.raises(InstantiationException) as refused:  # (zoo's commands print the error it wraps)
        objective(cfg, CharTokenizer("abc", ("<|endoftext|>",)).state())
    assert "task=sft trains on prompt / response rows" in str(refused.value.__cause__)
    assert "data=instructions" in str(refused.value.__cause__)
