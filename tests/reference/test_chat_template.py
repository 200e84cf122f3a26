"""`tessera template` vs the chat templates themselves rendered by jinja2 (the way Hugging Face
transformers renders them: sandboxed, trim_blocks, lstrip_blocks, strftime_now), byte for byte.

The default model's own template is used as stored in its GGUF; the other families are
well-known public templates written into vocab-only GGUFs with the default model's vocabulary,
some quoted here, the others as published with model releases (llama.cpp's models/templates, from
the pinned llama-cpp-python source package: scripts/fetch_templates.py)."""
import datetime
import functools
import os
import subprocess

import pytest

from test_tokenizer import copy_tokenizer_fields, finish, minimal_llama_writer, need

# Meta-Llama-3-8B-Instruct
LLAMA3 = (r"{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          r"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] "
          r"| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content "
          r"%}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
          r"'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
# Llama-2-7b-chat-hf
LLAMA2 = (r"{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
          r"system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          r"{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
          r"(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation"
          r" roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
          r"loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + "
          r"system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = "
          r"message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
          r"'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          r"{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
# Mistral-7B-Instruct-v0.1
MISTRAL = (r"{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
           r"(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
           r"user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
           r"{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
           r"'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
           r"user and assistant roles are supported!') }}{% endif %}{% endfor %}")
# Qwen2.5-Instruct without tools: ChatML with a constant default system prompt
QWEN = ("{%- if messages[0]['role'] == 'system' %}\n    {{- '<|im_start|>system\\n' + "
        "messages[0]['content'] + '<|im_end|>\\n' }}\n{%- else %}\n    {{- "
        "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if not "
        "(message.role == 'system' and loop.first) %}\n        {{- '<|im_start|>' + message.role + "
        "'\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- endif %}\n{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")

CONVERSATIONS = [
    [("user", "Hi")],
    [("system", "You are terse."), ("user", "What is 2+2?")],
    [("user", "  padded question \n"), ("assistant", " Four.\n\n"), ("user", "Thanks!")],
    [("system", "Rules:\n- be nice\n- be brief"), ("user", "héllo 世界 😀"),
     ("assistant", "Hello!"), ("user", "Code:\n```py\nprint('x')\n```")],
    [("user", "<|im_start|>not a turn"), ("assistant", "ok")],
    # Python's whitespace beyond ASCII (trim / strip / split): ideographic, no-break, line separator
    [("system", "\u3000Be brief.\u00a0"), ("user", "\u2028hi\u3000"), ("assistant", "\u00a0ok\u0085"),
     ("user", "bye\u2029")],
]


def jinja_render(template, messages, add_generation_prompt, bos, eos):
    jinja2 = need("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)  # as transformers
    return env.from_string(template).render(
        messages=[{"role": r, "content": c} for r, c in messages],
        add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos)


def tessera_render(binary, model, messages, add_generation_prompt):
    args = [binary, "template", model]
    if not add_generation_prompt:
        args.append("--no-generation-prompt")
    for r, c in messages:
        args += ["--msg", f"{r}={c}"]
    proc = subprocess.run(args, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode("utf-8")


@functools.lru_cache(maxsize=None)
def model_template(model_path):
    from gguf import GGUFReader
    r = GGUFReader(model_path)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    bos = tokens[int(r.fields["tokenizer.ggml.bos_token_id"].contents())]
    eos = tokens[int(r.fields["tokenizer.ggml.eos_token_id"].contents())]
    return r.fields["tokenizer.chat_template"].contents(), bos, eos


@pytest.fixture(scope="module")
def family_models(model_path, tmp_path_factory):
    need("gguf")
    tmp = tmp_path_factory.mktemp("templates")
    out = {}
    for name, text in [("llama3", LLAMA3), ("llama2", LLAMA2), ("mistral", MISTRAL),
                       ("qwen", QWEN), ("unknown", "{{ messages[0]['content'] }}")]:
        out[name] = (template_gguf(model_path, tmp / f"{name}.gguf", text), text)
    return out


def template_gguf(model_path, path, template):
    """A vocab-only GGUF with the default model's vocabulary and `template` as its chat template."""
    w = minimal_llama_writer(path)
    copy_tokenizer_fields(model_path, w, pre="smollm", drop=("tokenizer.chat_template",))
    w.add_string("tokenizer.chat_template", template)
    finish(w)
    return str(path)


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_default_model_template(conv, gen, model_path, tessera_bin):
    template, bos, eos = model_template(model_path)
    messages = CONVERSATIONS[conv]
    want = jinja_render(template, messages, gen, bos, eos)
    assert "You are a helpful AI assistant named SmolLM" in want or messages[0][0] == "system"
    assert tessera_render(tessera_bin, model_path, messages, gen) == want


@pytest.mark.parametrize("family", ["llama3", "llama2", "mistral", "qwen"])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_family_templates(family, conv, family_models, model_path, tessera_bin):
    path, template = family_models[family]
    _, bos, eos = model_template(model_path)
    messages = CONVERSATIONS[conv]
    if family == "mistral" and messages[0][0] == "system":
        pytest.skip("the Mistral v0.1 template rejects system messages")
    for gen in (True, False):
        want = jinja_render(template, messages, gen, bos, eos)
        assert tessera_render(tessera_bin, path, messages, gen) == want, (family, gen)


def test_unknown_template_is_interpreted(family_models, tessera_bin, model_path):
    """A template of no hand-written family is rendered by the Jinja interpreter."""
    path, template = family_models["unknown"]
    _, bos, eos = model_template(model_path)
    for messages in CONVERSATIONS:
        want = jinja_render(template, messages, True, bos, eos)
        assert tessera_render(tessera_bin, path, messages, True) == want


def test_template_the_interpreter_cannot_parse_is_rejected(model_path, tessera_bin, tmp_path):
    need("gguf")
    path = template_gguf(model_path, tmp_path / "include.gguf",
                         "{% for m in messages %}\n{% include 'turn.jinja' %}{% endfor %}")
    proc = subprocess.run([tessera_bin, "template", path, "--msg", "user=hi"], capture_output=True)
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "unsupported statement 'include'" in err and "line 2" in err, err


# Published templates of the hand-written families and those the families used to refuse (now
# rendered by the interpreter); test_jinja_templates.py renders the whole collection.
PUBLISHED_EXACT = ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
                   "meta-llama-Llama-3.3-70B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
                   "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
                   "unsloth-mistral-Devstral-Small-2507", "Qwen-QwQ-32B"]


@pytest.fixture(scope="module")
def published(model_path, published_templates_dir, tmp_path_factory):
    """name -> (vocab-only GGUF with the published template, template text)."""
    need("gguf")
    folder = published_templates_dir
    tmp = tmp_path_factory.mktemp("published")
    out = {}
    for name in PUBLISHED_EXACT:
        with open(os.path.join(folder, name + ".jinja"), encoding="utf-8") as f:
            text = f.read()
        out[name] = (template_gguf(model_path, tmp / f"{name}.gguf", text), text)
    return out


@pytest.mark.parametrize("name", PUBLISHED_EXACT)
def test_published_templates(name, published, model_path, tessera_bin):
    jinja2 = need("jinja2")
    path, template = published[name]
    _, bos, eos = model_template(model_path)
    compared = 0
    for messages in CONVERSATIONS:
        for gen in (True, False):
            try:
                want = jinja_render(template, messages, gen, bos, eos)
            except jinja2.exceptions.TemplateError:
                continue  # the template refuses this conversation (e.g. roles out of order)
            assert tessera_render(tessera_bin, path, messages, gen) == want, (name, messages, gen)
            compared += 1
    assert compared >= 6, compared
