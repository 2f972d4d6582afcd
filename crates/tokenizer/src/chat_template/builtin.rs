//! llama.cpp's built-in chat templates, by the names `--chat-template` takes (`chatml`, `llama3`,
//! …): each row is the Jinja equivalent of that name's branch of llama.cpp's
//! `llm_chat_apply_template` (src/llama-chat.cpp), message contents trimmed where it trims them.
//! Only these names are known; any other name is refused by the caller, naming the known ones.

/// `(name, Jinja source)`, one row per template.
const BUILTIN: [(&str, &str); 5] = [
    (
        "chatml",
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    ),
    (
        "llama3",
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n\
         {{ m.content | trim }}<|eot_id|>{% endfor %}\
         {% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}",
    ),
    (
        "command-r",
        "{% for m in messages %}\
         {% if m.role == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ m.content | trim }}<|END_OF_TURN_TOKEN|>\
         {% elif m.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content | trim }}<|END_OF_TURN_TOKEN|>\
         {% elif m.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{{ m.content | trim }}<|END_OF_TURN_TOKEN|>\
         {% endif %}{% endfor %}\
         {% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}",
    ),
    (
        "phi3",
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}<|end|>\n{% endfor %}\
         {% if add_generation_prompt %}<|assistant|>\n{% endif %}",
    ),
    (
        "phi4",
        "{% for m in messages %}<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}<|im_end|>{% endfor %}\
         {% if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif %}",
    ),
];

/// The Jinja source of llama.cpp's built-in template `name`, if it is one this table has.
pub fn builtin_template(name: &str) -> Option<&'static str> {
    BUILTIN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

/// The names [`builtin_template`] knows, for messages.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|(n, _)| *n)
}
