"""Every published chat template in llama.cpp's models/templates (from the pinned llama-cpp-python
source package, scripts/fetch_templates.py) rendered by `tessera template --chat-template` and by
transformers' own apply_chat_template renderer (jinja2, sandboxed, trim_blocks, lstrip_blocks,
tojson, strftime_now, raise_exception, loop controls, {% generation %}), byte for byte, for the
conversations of test_chat_template.py with and without a generation prompt. Where transformers
raises for a conversation (roles out of order, a feature the template requires), Tessera must
fail too. Tools, documents and images are not modelled: tools=None, documents=None, as
transformers passes them by default.

Run alone for the per-template table: pytest -s tests/reference/test_jinja_templates.py"""
import glob
import os
import subprocess

import pytest

from test_chat_template import CONVERSATIONS, model_template
from test_tokenizer import need

# Templates allowed to differ, with the reason. Keep this short; ideally empty.
ALLOW_LIST = {}


def transformers_render(template, messages, gen, bos, eos):
    """(text, None) or (None, error) from transformers' renderer."""
    need("transformers")
    from transformers.utils.chat_template_utils import render_jinja_template
    try:
        rendered, _ = render_jinja_template(
            conversations=[[{"role": r, "content": c} for r, c in messages]],
            chat_template=template, add_generation_prompt=gen, bos_token=bos, eos_token=eos)
        return rendered[0], None
    except Exception as e:  # noqa: BLE001 - any jinja2 / Python error is a refusal
        return None, f"{type(e).__name__}: {e}"


def tessera_render(binary, model, template_path, messages, gen):
    args = [binary, "template", model, "--chat-template", template_path]
    if not gen:
        args.append("--no-generation-prompt")
    for r, c in messages:
        args += ["--msg", f"{r}={c}"]
    proc = subprocess.run(args, capture_output=True, timeout=60)
    if proc.returncode != 0:
        return None, proc.stderr.decode(errors="replace")
    return proc.stdout.decode("utf-8"), None


def corpus(folder):
    return sorted(glob.glob(os.path.join(folder, "*.jinja")))


def test_all_published_templates(published_templates_dir, model_path, tessera_bin):
    files = corpus(published_templates_dir)
    if len(files) < 60:
        pytest.fail(f"only {len(files)} templates in {published_templates_dir}: "
                    "run scripts/fetch_templates.py")
    _, bos, eos = model_template(model_path)
    results = {}
    for path in files:
        name = os.path.basename(path)[:-len(".jinja")]
        with open(path, encoding="utf-8") as f:
            template = f.read()
        compared = refused = 0
        problem = None
        for messages in CONVERSATIONS:
            for gen in (True, False):
                want, werr = transformers_render(template, messages, gen, bos, eos)
                got, gerr = tessera_render(tessera_bin, model_path, path, messages, gen)
                if werr is not None:
                    if gerr is None:
                        problem = f"transformers raised ({werr}) but Tessera rendered; {messages} gen={gen}"
                    refused += 1
                elif gerr is not None:
                    problem = f"Tessera failed: {gerr.strip()}; {messages} gen={gen}"
                elif got != want:
                    problem = (f"differs for {messages} gen={gen}:\n  want {want!r}\n  got  {got!r}")
                else:
                    compared += 1
                if problem:
                    break
            if problem:
                break
        results[name] = (problem, compared, refused)
    passed = [n for n, (p, _, _) in results.items() if p is None]
    print(f"\n{len(passed)}/{len(results)} templates byte-identical to transformers")
    for n, (p, c, r) in sorted(results.items()):
        status = "ok" if p is None else ("ALLOWED" if n in ALLOW_LIST else "FAIL")
        print(f"  {status:7s} {n}: {c} renders identical, {r} refused by both"
              + ("" if p is None else f"\n          {p[:600]}"))
    failed = sorted(n for n, (p, _, _) in results.items() if p is not None and n not in ALLOW_LIST)
    assert not failed, f"{len(failed)} templates differ: {failed}"
    # A template that renders nothing at all would pass vacuously: most must render something.
    assert sum(c for _, c, _ in results.values()) >= 5 * len(results)
