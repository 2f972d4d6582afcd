//! Python semantics that chat templates rely on, against outputs of Python 3.11 / Jinja2 3.1.6
//! computed on the development machine with transformers' Jinja setup (trim_blocks,
//! lstrip_blocks, loopcontrols, `tojson` = `json.dumps(ensure_ascii=False, …)`) and pasted here:
//! `str` methods (pycompat and our replacements), `str()` of printed values, Jinja2's type tests,
//! whitespace control, and `tojson` in all its options.

use oxibonsai_tokenizer::chat_template::{ChatTemplate, TemplateError};
use serde_json::{Map, Value};

const PYTHON_VARIABLES: &str = r#"{"s": "\u001c\t hi \u00a0\n\u001f", "d": {"b": 1, "a": [1.5, null, true], "c": "it's"}, "msgs": [1, 2, 3, 4]}"#;

/// (name, template, what Jinja2 renders with transformers' setup)
const PYTHON_CASES: &[(&str, &str, &str)] = &[
    (
        "strip_python_whitespace",
        r#"[{{ s.strip() }}]"#,
        "[hi]",
    ),
    (
        "lstrip_rstrip_default",
        r#"[{{ s.lstrip() }}|{{ s.rstrip() }}]"#,
        "[hi \u{a0}\n\u{1f}|\u{1c}\t hi]",
    ),
    (
        "strip_chars",
        r#"{{ 'xyhixy'.strip('xy') }} {{ '\n\nhi\n'.lstrip('\n') }} {{ 'hi!!'.rstrip('!') }} {{ 'abc'.strip(none) }}"#,
        "hi hi\n hi abc",
    ),
    (
        "split_sep_negative_index",
        r#"{{ 'a</think>b</think>\n\nc'.split('</think>')[-1].lstrip('\n') }}|{{ 'a</think>b'.split('</think>')[0] }}"#,
        "c|a",
    ),
    (
        "split_whitespace",
        r#"{{ ' a \t b\u001cc\n'.split() }} {{ '   '.split() }} {{ ''.split() }}"#,
        "['a', 'b', 'c'] [] []",
    ),
    (
        "split_maxsplit",
        r#"{{ 'x  y z '.split(none, 1) }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.split(sep=',', maxsplit=0) }} {{ 'a,,b'.split(',') }}"#,
        "['x', 'y z '] ['a', 'b,c'] ['a,b,c'] ['a', '', 'b']",
    ),
    (
        "rsplit",
        r#"{{ 'a,b,c'.rsplit(',', 1) }} {{ '  a b  c '.rsplit(none, 1) }} {{ 'a b c'.rsplit() }}"#,
        "['a,b', 'c'] ['  a b', 'c'] ['a', 'b', 'c']",
    ),
    (
        "startswith_endswith",
        r#"{{ '<tool_response>x'.startswith('<tool_response>') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'ab')) }} {{ 'abc'.endswith(('x', 'y')) }}"#,
        "True True True False",
    ),
    (
        "replace",
        r#"{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'a-b-c'.replace('-', '') }}"#,
        "bba -a-b- abc",
    ),
    (
        "upper_lower",
        r#"{{ 'Straße'.upper() }} {{ 'ÀBÇ'.lower() }}"#,
        "STRASSE àbç",
    ),
    (
        "find_character_index",
        r#"{{ 'héllo wörld'.find('w') }} {{ 'héllo wörld'.rfind('l') }} {{ 'abc'.find('z') }} {{ 'héllo'.index('l') }} {{ 'abcabc'.find('c', 3) }} {{ 'abcabc'.find('c', -2, -1) }}"#,
        "6 9 -1 2 5 -1",
    ),
    (
        "count",
        r#"{{ 'banana'.count('an') }} {{ 'aaaa'.count('aa') }} {{ 'abc'.count('') }} {{ 'héé'.count('') }}"#,
        "2 2 4 4",
    ),
    (
        "title_capitalize",
        r#"{{ "they're 1st-class".title() }} {{ 'hELLO wORLD'.capitalize() }}"#,
        "They'Re 1St-Class Hello world",
    ),
    (
        "splitlines",
        r#"{{ 'a\r\nb\rc\nd\n'.splitlines() }} {{ 'a\r\nb\n'.splitlines(true) }} {{ 'x\u2028y'.splitlines() }}"#,
        "['a', 'b', 'c', 'd'] ['a\\r\\n', 'b\\n'] ['x', 'y']",
    ),
    (
        "dict_methods",
        r#"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.get('missing', 'dflt') }} {{ d.get('missing') }} {{ d.get('b') }} {{ d.keys() | list }}"#,
        "b=1;a=[1.5, None, True];c=it's; dflt None 1 ['b', 'a', 'c']",
    ),
    (
        "join_removeprefix",
        r#"{{ ', '.join(['a', 'b']) }} {{ 'prefix-x'.removeprefix('prefix-') }} {{ 'x.json'.removesuffix('.json') }} {{ 'x'.removeprefix('y') }}"#,
        "a, b x x x",
    ),
    (
        "python_str_of_values",
        r#"{{ none }} {{ true }} {{ false }} {{ [1, 'a', none, true, 1.5, {'k': "it's"}] }} {{ 1e-5 }} {{ 18.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ d }} {{ missing }}"#,
        "None True False [1, 'a', None, True, 1.5, {'k': \"it's\"}] 1e-05 18.0 0.30000000000000004 1e+16 3 3.5 {'b': 1, 'a': [1.5, None, True], 'c': \"it's\"} ",
    ),
    (
        "string_repr_quotes",
        r#"{{ ["it's", 'say "hi"', 'both \' "', 'tab\tnl\n', 'back\\slash'] }}"#,
        "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnl\\n', 'back\\\\slash']",
    ),
    (
        "type_tests",
        r#"{{ 'ab' is sequence }} {{ {} is sequence }} {{ 3 is sequence }} {{ none is iterable }} {{ 'x' is iterable }} {{ true is number }} {{ true is integer }} {{ d is mapping }} {{ msgs is mapping }} {{ missing is defined }} {{ 3 is integer }} {{ 3.0 is float }} {{ 'a' is string }} {{ none is none }} {{ false is false }}"#,
        "True True False False True True False True False False True True True True True",
    ),
    (
        "namespace_loop_slicing",
        r#"{% set ns = namespace(n=0, last=-1) %}{% for m in msgs[::-1] %}{% set ns.n = ns.n + loop.index0 %}{% if loop.last %}{% set ns.last = m %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.last }} {{ msgs[1:3] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ msgs | length }} {{ 'héllo' | length }} {{ '  x  ' | trim }}"#,
        "6 1 [2, 3] el olleh 4 5 x",
    ),
    (
        "loop_controls",
        r#"{% for m in msgs %}{% if m == 2 %}{% continue %}{% endif %}{% if m == 4 %}{% break %}{% endif %}{{ m }}{% endfor %}"#,
        "13",
    ),
    (
        "whitespace_control",
        r#"<start>
  {% if true %}
    line
  {% endif %}
  {%- for m in msgs %}
{{ m }}
{%- endfor %}
   {{- 'end' -}}   

"#,
        "<start>\n    line\n1234end",
    ),
    (
        "tojson_default",
        r#"{{ d | tojson }} {{ {'unicode': 'héllo ✓ 中文', 'html': '<b>&\'</b>', 'ctl': '\u0001\b\f\u007f', 'quote': 'a"b\\c'} | tojson }} {{ [1, -2, 1.0, 2.5e-7, 1e22, true, false, none, 12345678901234567] | tojson }} {{ 'x' | tojson }} {{ [] | tojson }} {{ {} | tojson }}"#,
        "{\"b\": 1, \"a\": [1.5, null, true], \"c\": \"it's\"} {\"unicode\": \"héllo ✓ 中文\", \"html\": \"<b>&'</b>\", \"ctl\": \"\\u0001\\b\\f\u{7f}\", \"quote\": \"a\\\"b\\\\c\"} [1, -2, 1.0, 2.5e-07, 1e+22, true, false, null, 12345678901234567] \"x\" [] {}",
    ),
    (
        "tojson_indent",
        r#"{{ {'a': [1, {'b': none}], 'c': {}, 'd': []} | tojson(indent=2) }}
{{ [1, 2] | tojson(indent=0) }}
{{ {'k': 'v'} | tojson(indent='\t') }}"#,
        "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {},\n  \"d\": []\n}\n[\n1,\n2\n]\n{\n\t\"k\": \"v\"\n}",
    ),
    (
        "tojson_options",
        r#"{{ {'é': '😀 ü'} | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ {'a': [1, 2]} | tojson(separators=(',', ':')) }} {{ {'a': [1, 2]} | tojson(indent=1, separators=(', ', ': ')) }}"#,
        "{\"\\u00e9\": \"\\ud83d\\ude00 \\u00fc\"} {\"a\": 2, \"b\": 1} {\"a\":[1,2]} {\n \"a\": [\n  1, \n  2\n ]\n}",
    ),
];

fn variables() -> Map<String, Value> {
    serde_json::from_str(PYTHON_VARIABLES).expect("variables parse")
}

#[test]
fn templates_render_as_jinja2_does() {
    let variables = variables();
    let mut failures = Vec::new();
    for (name, source, expected) in PYTHON_CASES {
        let rendered = ChatTemplate::new(source).and_then(|t| t.render_variables(&variables));
        match rendered {
            Ok(text) if text == *expected => {}
            Ok(text) => failures.push(format!(
                "{name}: expected {expected:?}\n{:>width$}got {text:?}",
                "",
                width = name.len() + 2
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        PYTHON_CASES.len(),
        failures.join("\n")
    );
}

/// Python raises on these; so must we (an error, not a panic or a guess).
#[test]
fn python_errors_stay_errors() {
    let variables = variables();
    for source in [
        "{{ 'a,b'.split('') }}",
        "{{ 'abc'.index('z') }}",
        "{{ missing | tojson }}",
        "{{ {'a': 1} | tojson(false, 2, indent=3) }}",
        "{{ {'a': 1} | tojson(separators=',') }}",
        "{{ {'a': 1} | tojson(false, none, none, false, 5) }}",
        "{{ {'a': 1} | tojson(bogus=1) }}",
        "{{ 'abc'.no_such_method() }}",
    ] {
        let template = ChatTemplate::new(source).expect(source);
        match template.render_variables(&variables) {
            Err(TemplateError::Render { .. }) => {}
            other => panic!("{source}: expected a render error, got {other:?}"),
        }
    }
}
