//! Tests of the canonicaliser: RFC 8785 vectors, strict parsing, pointers, exclusions,
//! normalisers, limits and properties.
#![allow(clippy::unwrap_used)]

use super::normalise::canonical_decimal;
use super::parse::MAX_DEPTH;
use super::*;
use proptest::prelude::*;
use serde_json::{Map, Number, json};

fn canon(body: &str) -> Result<String, CanonicalError> {
    canon_with(&Canonicalizer::new(), body)
}

fn canon_with(c: &Canonicalizer, body: &str) -> Result<String, CanonicalError> {
    c.canonicalize(body.as_bytes()).map(|bytes| String::from_utf8(bytes).unwrap())
}

fn decimal(c: &Canonicalizer, body: &str) -> String {
    canon_with(c, body).unwrap()
}

// --- RFC 8785 ------------------------------------------------------------------------------

/// RFC 8785 section 3.2.2 input and section 3.2.3/3.2.4 output.
#[test]
fn rfc8785_sample() {
    let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
          2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
    assert_eq!(canon(input).unwrap(), expected);
}

/// RFC 8785 section 3.2.4: the UTF-8 bytes of the canonical sample, as printed in hex.
#[test]
fn rfc8785_sample_utf8_hex() {
    let input = include_bytes!("../../testdata/canonical/input/values.json");
    let hex = include_str!("../../testdata/canonical/outhex/values.txt");
    let expected: Vec<u8> = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
    assert_eq!(Canonicalizer::new().canonicalize(input).unwrap(), expected);
}

/// RFC 8785 section 3.2.3: members sorted by UTF-16 code units. The RFC lists the expected
/// order as the property values: Carriage Return, One, Control, Latin Small Letter O With
/// Diaeresis, Euro Sign, Emoji: Grinning Face, Hebrew Letter Dalet With Dagesh. U+1F600 sorts
/// before U+FB33 because its UTF-16 form starts with the surrogate 0xD83D. The names are
/// serialised per section 3.2.2.2: `\r` escaped, U+0080 and above as raw UTF-8.
#[test]
fn rfc8785_property_sorting() {
    let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
        \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
        \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(canon(input).unwrap(), expected);
}

/// RFC 8785 appendix B: IEEE 754 bit patterns and their canonical text.
#[test]
fn rfc8785_appendix_b_numbers() {
    let cases: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    let c = Canonicalizer::new();
    for &(bits, expected) in cases {
        let number = Number::from_f64(f64::from_bits(bits)).unwrap();
        let out = c.canonicalize_value(Value::Number(number.clone())).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), expected, "bits {bits:#018x}");
        // The same double written as JSON text parses back to the same canonical form.
        let text = serde_json::to_string(&number).unwrap();
        assert_eq!(canon(&text).unwrap(), expected, "text {text}");
    }
    // NaN and the infinities (appendix B: "must cause an error") cannot even enter a Value.
    for bits in [0x7fffffffffffffff_u64, 0x7ff0000000000000, 0xfff0000000000000] {
        assert!(Number::from_f64(f64::from_bits(bits)).is_none());
    }
}

/// The test vectors of the RFC 8785 reference implementation (see testdata/canonical).
#[test]
fn reference_implementation_vectors() {
    let vectors: &[(&str, &[u8], &str)] = &[
        (
            "arrays",
            include_bytes!("../../testdata/canonical/input/arrays.json"),
            include_str!("../../testdata/canonical/outhex/arrays.txt"),
        ),
        (
            "french",
            include_bytes!("../../testdata/canonical/input/french.json"),
            include_str!("../../testdata/canonical/outhex/french.txt"),
        ),
        (
            "structures",
            include_bytes!("../../testdata/canonical/input/structures.json"),
            include_str!("../../testdata/canonical/outhex/structures.txt"),
        ),
        (
            "unicode",
            include_bytes!("../../testdata/canonical/input/unicode.json"),
            include_str!("../../testdata/canonical/outhex/unicode.txt"),
        ),
        (
            "values",
            include_bytes!("../../testdata/canonical/input/values.json"),
            include_str!("../../testdata/canonical/outhex/values.txt"),
        ),
        (
            "weird",
            include_bytes!("../../testdata/canonical/input/weird.json"),
            include_str!("../../testdata/canonical/outhex/weird.txt"),
        ),
    ];
    for (name, input, hex) in vectors {
        let expected: Vec<u8> = hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect();
        assert_eq!(Canonicalizer::new().canonicalize(input).unwrap(), expected, "{name}");
    }
    assert_eq!(
        include_str!("../../testdata/canonical/output/weird.json").trim_end(),
        canon(include_str!("../../testdata/canonical/input/weird.json")).unwrap()
    );
}

#[test]
fn minus_zero_and_number_spellings() {
    assert_eq!(canon("[-0, -0.0, 0e5, 1.0, 1E2, 10e-1, 0.1e1]").unwrap(), "[0,0,0,1,100,1,1]");
    assert_eq!(canon("  \"\\u0041\\t\"  ").unwrap(), r#""A\t""#);
}

// --- Exclusions ----------------------------------------------------------------------------

#[test]
fn exclude_top_level_and_missing_paths() {
    let c = Canonicalizer::new().exclude("/trace_id").unwrap().exclude("/not/there").unwrap();
    assert_eq!(canon_with(&c, r#"{"a":1,"trace_id":"x"}"#).unwrap(), r#"{"a":1}"#);
    assert_eq!(canon_with(&c, r#"{"a":1}"#).unwrap(), r#"{"a":1}"#);
    assert_eq!(canon_with(&c, r#"[1,2]"#).unwrap(), "[1,2]");
    assert_eq!(canon_with(&c, r#""scalar""#).unwrap(), r#""scalar""#);
    assert_eq!(canon_with(&c, r#"{"not":5}"#).unwrap(), r#"{"not":5}"#);
}

#[test]
fn exclude_nested_and_whole_subtree() {
    let c = Canonicalizer::new().exclude("/meta/sent_at").unwrap().exclude("/headers").unwrap();
    let body = r#"{"meta":{"sent_at":"2026-01-01","kind":"pay"},"headers":{"authorization":"Bearer x"},"x":1}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"meta":{"kind":"pay"},"x":1}"#);
}

#[test]
fn exclude_wildcards() {
    let c = Canonicalizer::new().exclude("/items/*/trace").unwrap();
    let body = r#"{"items":[{"trace":1,"sku":"a"},{"sku":"b"},7,{"trace":{"deep":true}}],"trace":0}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"items":[{"sku":"a"},{"sku":"b"},7,{}],"trace":0}"#);

    // A wildcard over object members.
    let c = Canonicalizer::new().exclude("/by_id/*/request_id").unwrap();
    let body = r#"{"by_id":{"a":{"request_id":1,"v":1},"b":{"request_id":2,"v":2}}}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"by_id":{"a":{"v":1},"b":{"v":2}}}"#);

    // A trailing wildcard empties the container; a leading one applies to every member.
    let c = Canonicalizer::new().exclude("/tags/*").unwrap().exclude("/*/ts").unwrap();
    let body = r#"{"tags":["x","y"],"a":{"ts":1,"k":2},"b":[{"ts":3}],"c":{"ts":4}}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"k":2},"b":[{"ts":3}],"c":{},"tags":[]}"#);
}

#[test]
fn exclude_wildcard_and_literal_overlap() {
    let c = Canonicalizer::new().exclude("/a/*/x").unwrap().exclude("/a/k/y").unwrap();
    let body = r#"{"a":{"k":{"x":1,"y":2,"z":3},"m":{"x":1,"y":2}}}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"k":{"z":3},"m":{"y":2}}}"#);
}

#[test]
fn exclude_escaped_pointers() {
    let c = Canonicalizer::new().exclude("/a~1b").unwrap().exclude("/m~0n").unwrap().exclude("/~01").unwrap();
    let body = r#"{"a/b":1,"m~n":2,"~1":3,"a":{"b":4},"keep":5}"#;
    assert_eq!(canon_with(&c, body).unwrap(), r#"{"a":{"b":4},"keep":5}"#);
    // The empty member name is addressed by "/".
    let c = Canonicalizer::new().exclude("/").unwrap();
    assert_eq!(canon_with(&c, r#"{"":1,"a":2}"#).unwrap(), r#"{"a":2}"#);
}

#[test]
fn exclude_array_indices_refer_to_the_parsed_document() {
    let c = Canonicalizer::new().exclude("/l/2").unwrap().exclude("/l/0").unwrap();
    assert_eq!(canon_with(&c, "{\"l\":[0,1,2,3]}").unwrap(), r#"{"l":[1,3]}"#);
    // Leading zeros, "-" and out-of-range indices name nothing.
    let c = Canonicalizer::new().exclude("/l/01").unwrap().exclude("/l/-").unwrap().exclude("/l/9").unwrap();
    assert_eq!(canon_with(&c, "{\"l\":[0,1,2]}").unwrap(), "{\"l\":[0,1,2]}");
    // An object member named like an index is matched by name.
    let c = Canonicalizer::new().exclude("/0").unwrap();
    assert_eq!(canon_with(&c, r#"{"0":1,"1":2}"#).unwrap(), r#"{"1":2}"#);
}

#[test]
fn exclusions_run_before_normalisers() {
    let c = Canonicalizer::new().normalise("/*", Normaliser::Uppercase).unwrap().exclude("/sent_at").unwrap();
    assert_eq!(canon_with(&c, r#"{"cur":"brl","sent_at":12345}"#).unwrap(), r#"{"cur":"BRL"}"#);
}

#[test]
fn invalid_pointers() {
    let err = |p: &str| Canonicalizer::new().exclude(p).unwrap_err();
    for pointer in ["a", "a/b", "/a~", "/a~2", "/~/x", "/ok/b~x"] {
        assert!(matches!(err(pointer), CanonicalError::InvalidPointer { .. }), "{pointer}");
        assert!(matches!(
            Canonicalizer::new().normalise(pointer, Normaliser::Trim),
            Err(CanonicalError::InvalidPointer { .. })
        ));
    }
    assert_eq!(
        err(""),
        CanonicalError::InvalidPointer { pointer: String::new(), reason: "the whole document cannot be excluded" }
    );
    // The root is a valid normalisation target.
    let c = Canonicalizer::new().normalise("", Normaliser::Trim).unwrap();
    assert_eq!(canon_with(&c, r#"" x ""#).unwrap(), r#""x""#);
}

// --- Normalisers ---------------------------------------------------------------------------

#[test]
fn trim() {
    let c = Canonicalizer::new().normalise("/s", Normaliser::Trim).unwrap();
    assert_eq!(canon_with(&c, r#"{"s":"  a b \t\n"}"#).unwrap(), r#"{"s":"a b"}"#);
    // Unicode White_Space: NO-BREAK SPACE, IDEOGRAPHIC SPACE.
    assert_eq!(canon_with(&c, "{\"s\":\"\u{a0}x\u{3000}\"}").unwrap(), r#"{"s":"x"}"#);
    assert_eq!(canon_with(&c, r#"{"s":"   "}"#).unwrap(), r#"{"s":""}"#);
}

#[test]
fn uppercase_and_lowercase_are_ascii_only() {
    let up = Canonicalizer::new().normalise("/c", Normaliser::Uppercase).unwrap();
    assert_eq!(canon_with(&up, r#"{"c":"brl"}"#).unwrap(), r#"{"c":"BRL"}"#);
    assert_eq!(canon_with(&up, r#"{"c":"straße-é"}"#).unwrap(), r#"{"c":"STRAßE-é"}"#);
    let down = Canonicalizer::new().normalise("/c", Normaliser::Lowercase).unwrap();
    assert_eq!(canon_with(&down, r#"{"c":"Hello-É"}"#).unwrap(), r#"{"c":"hello-É"}"#);
}

#[test]
fn normalisers_run_in_order_and_through_wildcards() {
    let c = Canonicalizer::new()
        .normalise("/items/*/cur", Normaliser::Trim)
        .unwrap()
        .normalise("/items/*/cur", Normaliser::Uppercase)
        .unwrap()
        .normalise("/items/1/amt", Normaliser::DecimalAmount)
        .unwrap();
    let body = r#"{"items":[{"cur":" usd ","amt":"1.0"},{"cur":"eur","amt":"2.50"},{"x":1},5]}"#;
    assert_eq!(
        canon_with(&c, body).unwrap(),
        r#"{"items":[{"amt":"1.0","cur":"USD"},{"amt":"2.5","cur":"EUR"},{"x":1},5]}"#
    );
    // Missing paths are a no-op.
    assert_eq!(canon_with(&c, r#"{"other":1}"#).unwrap(), r#"{"other":1}"#);
    assert_eq!(canon_with(&c, r#"{"items":"none"}"#).unwrap(), r#"{"items":"none"}"#);
}

#[test]
fn decimal_amount_strings() {
    let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
    let cases = [
        ("10.50", "10.5"),
        ("010.5", "10.5"),
        ("10.500", "10.5"),
        ("10.5", "10.5"),
        ("10.", "10"),
        ("10", "10"),
        ("100", "100"),
        ("0100.0100", "100.01"),
        (".5", "0.5"),
        ("0.05", "0.05"),
        ("000", "0"),
        ("0.000", "0"),
        ("-0.0", "0"),
        ("-0", "0"),
        ("-.0", "0"),
        ("-007.10", "-7.1"),
        ("123456789012345678901234567890.123456789", "123456789012345678901234567890.123456789"),
    ];
    for (input, expected) in cases {
        let body = format!(r#"{{"a":"{input}"}}"#);
        assert_eq!(decimal(&c, &body), format!(r#"{{"a":"{expected}"}}"#), "{input}");
    }
}

#[test]
fn decimal_amount_numbers() {
    let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
    let cases = [
        ("10.5", "10.5"),
        ("10.50", "10.5"),
        ("10", "10"),
        ("-0.0", "0"),
        ("-0", "0"),
        ("1e3", "1000"),
        ("1E+3", "1000"),
        ("25e-3", "0.025"),
        ("1e30", "1000000000000000000000000000000"),
        ("-1.5e-7", "-0.00000015"),
        ("18446744073709551615", "18446744073709551615"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("0.1", "0.1"),
    ];
    for (input, expected) in cases {
        let body = format!(r#"{{"a":{input}}}"#);
        assert_eq!(decimal(&c, &body), format!(r#"{{"a":"{expected}"}}"#), "{input}");
    }
    // The headline equivalence.
    let all: Vec<String> = [r#""10.50""#, r#""10.5""#, "10.5", r#""10.500""#, r#""010.5""#]
        .iter()
        .map(|a| decimal(&c, &format!(r#"{{"a":{a}}}"#)))
        .collect();
    assert!(all.iter().all(|x| x == &all[0]), "{all:?}");
    assert_ne!(decimal(&c, r#"{"a":"10.51"}"#), all[0]);
}

#[test]
fn decimal_amount_refuses_non_decimals() {
    let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
    for input in ["", ".", "-", "-.", "+1", " 1", "1 ", "1e3", "1E3", "1,000.00", "1.2.3", "0x10", "NaN", "１"] {
        let body = serde_json::to_string(&json!({ "a": input })).unwrap();
        assert_eq!(
            canon_with(&c, &body),
            Err(CanonicalError::InvalidDecimal { pointer: "/a".into(), value: input.into() }),
            "{input:?}"
        );
    }
    // Long values are cut in the error.
    let long = "9".repeat(100) + "x";
    let body = serde_json::to_string(&json!({ "a": long })).unwrap();
    let Err(CanonicalError::InvalidDecimal { value, .. }) = canon_with(&c, &body) else { panic!() };
    assert_eq!(value, "9".repeat(64) + "…");
}

#[test]
fn canonical_decimal_exponent_bounds() {
    assert_eq!(canonical_decimal("1e400", true).map(|s| s.len()), Some(401));
    assert_eq!(canonical_decimal("1e401", true), None);
    assert_eq!(canonical_decimal("1e", true), None);
    assert_eq!(canonical_decimal("1e+", true), None);
    assert_eq!(canonical_decimal("e5", true), None);
    assert_eq!(canonical_decimal("1e1e1", true), None);
    assert_eq!(canonical_decimal("5e-324", true).map(|s| s.len()), Some(326));
    assert_eq!(canonical_decimal("0e300", true).as_deref(), Some("0"));
    assert_eq!(canonical_decimal("0e999", true), None);
}

#[test]
fn normaliser_type_mismatch() {
    let cases = [
        (Normaliser::Trim, "1", "number"),
        (Normaliser::Uppercase, "null", "null"),
        (Normaliser::Lowercase, "[]", "array"),
        (Normaliser::DecimalAmount, "true", "boolean"),
        (Normaliser::DecimalAmount, "{}", "object"),
        (Normaliser::DecimalAmount, "null", "null"),
    ];
    for (normaliser, value, found) in cases {
        let c = Canonicalizer::new().normalise("/list/*/v", normaliser).unwrap();
        let body = format!(r#"{{"list":[{{"v":"ok"}},{{"v":{value}}}]}}"#);
        let err = canon_with(&c, &body).unwrap_err();
        if normaliser == Normaliser::DecimalAmount {
            // "ok" itself is not a decimal: the first element already fails.
            assert!(matches!(err, CanonicalError::InvalidDecimal { .. }));
            let body = format!(r#"{{"list":[{{"v":"1"}},{{"v":{value}}}]}}"#);
            let err = canon_with(&c, &body).unwrap_err();
            assert_eq!(
                err,
                CanonicalError::NormaliserTypeMismatch {
                    pointer: "/list/1/v".into(),
                    expected: "a decimal string or number",
                    found
                }
            );
        } else {
            assert_eq!(
                err,
                CanonicalError::NormaliserTypeMismatch { pointer: "/list/1/v".into(), expected: "a string", found }
            );
        }
    }
    // Concrete pointers in errors are escaped.
    let c = Canonicalizer::new().normalise("/*", Normaliser::Trim).unwrap();
    let err = canon_with(&c, r#"{"a/~b":1}"#).unwrap_err();
    assert!(matches!(err, CanonicalError::NormaliserTypeMismatch { ref pointer, .. } if pointer == "/a~1~0b"));
    assert!(err.to_string().contains("expected a string"), "{err}");
}

// --- Parsing and limits --------------------------------------------------------------------

#[test]
fn body_limit_is_checked_before_parsing() {
    let c = Canonicalizer::new().max_body_bytes(9);
    assert_eq!(canon_with(&c, "[1,2,3]").unwrap(), "[1,2,3]");
    assert_eq!(canon_with(&c, "[1, 2, 3]").unwrap(), "[1,2,3]");
    assert_eq!(canon_with(&c, "[1,  2, 3]"), Err(CanonicalError::BodyTooLarge { len: 10, max: 9 }));
    // Over the limit and not even JSON: the size is reported, not the syntax.
    assert_eq!(canon_with(&c, "not json!!"), Err(CanonicalError::BodyTooLarge { len: 10, max: 9 }));
    let big = vec![b' '; DEFAULT_MAX_BODY_BYTES + 1];
    assert_eq!(
        Canonicalizer::default().fingerprint(&big),
        Err(CanonicalError::BodyTooLarge { len: DEFAULT_MAX_BODY_BYTES + 1, max: DEFAULT_MAX_BODY_BYTES })
    );
}

#[test]
fn invalid_json() {
    for body in ["", "   ", "{", "[1,]", "{\"a\" 1}", "nul", "01", "1.", "'x'", "[1] [2]", "{} x", "\u{feff}{}"] {
        assert!(matches!(canon(body), Err(CanonicalError::InvalidJson { .. })), "{body:?}: {:?}", canon(body));
    }
    let Err(CanonicalError::InvalidJson { line, column, message }) = canon("{\n  \"a\": tru,\n}") else {
        panic!("expected InvalidJson");
    };
    assert_eq!((line, column), (2, 11));
    assert!(!message.contains("at line"), "{message}");
    // Invalid UTF-8 inside a string.
    assert!(matches!(Canonicalizer::new().canonicalize(b"[\"\xff\"]"), Err(CanonicalError::InvalidJson { .. })));
}

#[test]
fn duplicate_member_names_are_refused() {
    for body in [r#"{"a":1,"a":2}"#, r#"{"a":1,"\u0061":1}"#, r#"[{"x":{"k":1,"j":2,"k":3}}]"#] {
        let err = canon(body).unwrap_err();
        let CanonicalError::NotCanonicalisable { reason } = &err else { panic!("{body}: {err:?}") };
        assert!(reason.starts_with("duplicate member name"), "{reason}");
        assert!(reason.contains("line 1"), "{reason}");
    }
    // Same name in different objects is fine.
    assert_eq!(canon(r#"[{"a":1},{"a":2}]"#).unwrap(), r#"[{"a":1},{"a":2}]"#);
}

#[test]
fn non_i_json_is_refused() {
    for body in ["1e400", "[-1e309]", r#""\ud800""#, r#""\udc00""#, r#""\ud800\u0041""#, r#"{"\ud83d":1}"#] {
        assert!(matches!(canon(body), Err(CanonicalError::NotCanonicalisable { .. })), "{body}: {:?}", canon(body));
    }
    // Very small numbers underflow to zero rather than fail.
    assert_eq!(canon("1e-400").unwrap(), "0");
}

#[test]
fn nesting_limit() {
    let nested = |depth: usize| "[".repeat(depth) + &"]".repeat(depth);
    assert_eq!(canon(&nested(MAX_DEPTH)).unwrap(), nested(MAX_DEPTH));
    assert_eq!(canon(&nested(MAX_DEPTH + 1)), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));
    // Beyond serde_json's own limit of 128 the error is the same.
    assert_eq!(canon(&nested(500)), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));
    let objects = "{\"a\":".repeat(MAX_DEPTH + 1) + "1" + &"}".repeat(MAX_DEPTH + 1);
    assert_eq!(canon(&objects), Err(CanonicalError::TooDeep { max: MAX_DEPTH }));

    // The same limit for values built in code.
    let mut value = json!(1);
    for _ in 0..MAX_DEPTH {
        value = json!([value]);
    }
    assert!(Canonicalizer::new().canonicalize_value(value.clone()).is_ok());
    assert_eq!(
        Canonicalizer::new().canonicalize_value(json!({ "x": value })),
        Err(CanonicalError::TooDeep { max: MAX_DEPTH })
    );
}

#[test]
fn fingerprint_matches_canonical_bytes() {
    let c = Canonicalizer::new().exclude("/trace_id").unwrap();
    let body = br#"{"b":2,"a":1,"trace_id":"t"}"#;
    assert_eq!(c.fingerprint(body).unwrap(), Fingerprint::of_canonical_json(br#"{"a":1,"b":2}"#));
    assert_eq!(c.fingerprint(b"{").unwrap_err(), canon_with(&c, "{").unwrap_err());
}

#[test]
fn errors_display() {
    let errors = [
        CanonicalError::BodyTooLarge { len: 2, max: 1 },
        CanonicalError::InvalidJson { line: 1, column: 2, message: "EOF".into() },
        CanonicalError::InvalidPointer { pointer: "x".into(), reason: "r" },
        CanonicalError::NotCanonicalisable { reason: "r".into() },
        CanonicalError::NormaliserTypeMismatch { pointer: "/a".into(), expected: "a string", found: "null" },
        CanonicalError::InvalidDecimal { pointer: "/a".into(), value: "x".into() },
        CanonicalError::TooDeep { max: 64 },
    ];
    for err in errors {
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(Normaliser::DecimalAmount.to_string(), "decimal");
    assert_eq!("decimal".parse::<Normaliser>(), Ok(Normaliser::DecimalAmount));
}

// --- Properties ----------------------------------------------------------------------------

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        any::<String>().prop_map(Value::String),
        "[a-c\\\\\"\u{0}-\u{1f}é€😀]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-d~/*é😀\u{7f}-\u{81}]{0,3}|\\PC{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Tiny deterministic generator for layout choices.
struct Layout(u64);

impl Layout {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn space(&mut self, out: &mut String) {
        out.push_str(["", " ", "\n", "\t", "\r\n  "][self.next(5) as usize]);
    }

    fn string(&mut self, s: &str, out: &mut String) {
        if self.next(2) == 0 {
            out.push_str(&serde_json::to_string(s).unwrap());
            return;
        }
        // Every character as a \u escape (UTF-16, surrogate pairs for astral characters).
        out.push('"');
        for unit in s.encode_utf16() {
            out.push_str(&format!("\\u{unit:04X}"));
        }
        out.push('"');
    }

    /// Serialises `value` with shuffled members, random whitespace and random escapes.
    fn render(&mut self, value: &Value, out: &mut String) {
        self.space(out);
        match value {
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.render(item, out);
                }
                self.space(out);
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                for i in (1..entries.len()).rev() {
                    let j = self.next(i as u64 + 1) as usize;
                    entries.swap(i, j);
                }
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.space(out);
                    self.string(key, out);
                    self.space(out);
                    out.push(':');
                    self.render(item, out);
                }
                self.space(out);
                out.push('}');
            }
            Value::String(s) => self.string(s, out),
            scalar => out.push_str(&serde_json::to_string(scalar).unwrap()),
        }
        self.space(out);
    }
}

proptest! {
    #[test]
    fn canonicalize_is_idempotent(value in arb_json()) {
        let c = Canonicalizer::new();
        let once = c.canonicalize_value(value).unwrap();
        let twice = c.canonicalize(&once).unwrap();
        prop_assert_eq!(&once, &twice);
        prop_assert!(std::str::from_utf8(&once).is_ok());
    }

    #[test]
    fn canonical_form_ignores_layout(value in arb_json(), seed in 1u64..) {
        let c = Canonicalizer::new();
        let expected = c.canonicalize_value(value.clone()).unwrap();
        let mut text = String::new();
        Layout(seed).render(&value, &mut text);
        prop_assert_eq!(c.canonicalize(text.as_bytes()).unwrap(), expected.clone(), "{}", text);
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        prop_assert_eq!(c.canonicalize(&pretty).unwrap(), expected);
    }

    #[test]
    fn excluded_fields_do_not_matter(
        members in prop::collection::btree_map("\\PC{0,4}", arb_json(), 0..6),
        trace in arb_json(),
    ) {
        let c = Canonicalizer::new().exclude("/trace_id").unwrap();
        let mut map: Map<String, Value> = members.into_iter().collect();
        map.remove("trace_id");
        let without = c.canonicalize_value(Value::Object(map.clone())).unwrap();
        map.insert("trace_id".into(), trace);
        prop_assert_eq!(c.canonicalize_value(Value::Object(map)).unwrap(), without);
    }

    #[test]
    fn decimal_spellings_agree(
        negative in any::<bool>(),
        int in "[0-9]{1,20}",
        frac in "[0-9]{0,10}",
        leading in 0usize..4,
        trailing in 0usize..4,
    ) {
        let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
        let sign = if negative { "-" } else { "" };
        let plain = format!(r#"{{"a":"{sign}{int}.{frac}"}}"#);
        let padded = format!(r#"{{"a":"{sign}{}{int}.{frac}{}"}}"#, "0".repeat(leading), "0".repeat(trailing));
        let canonical = decimal(&c, &plain);
        prop_assert_eq!(&decimal(&c, &padded), &canonical);
        // The output is itself canonical: a fixed point, no leading/trailing zeros or dot.
        prop_assert_eq!(&decimal(&c, &canonical), &canonical);
        let Value::Object(map) = serde_json::from_str::<Value>(&canonical).unwrap() else { unreachable!() };
        let Some(Value::String(out)) = map.get("a") else { unreachable!() };
        let digits = out.trim_start_matches('-');
        prop_assert!(digits == "0" || digits.starts_with("0.") || !digits.starts_with('0'), "{}", out);
        prop_assert!(!out.ends_with('.'), "{}", out);
        prop_assert!(!(out.contains('.') && out.ends_with('0')), "{}", out);
        prop_assert!(out != "-0");
    }

    #[test]
    fn decimal_numbers_agree_with_strings(int in 0u64..1_000_000_000, cents in 0u64..100) {
        let c = Canonicalizer::new().normalise("/a", Normaliser::DecimalAmount).unwrap();
        let as_number = decimal(&c, &format!(r#"{{"a":{int}.{cents:02}}}"#));
        let as_string = decimal(&c, &format!(r#"{{"a":"{int}.{cents:02}"}}"#));
        prop_assert_eq!(as_number, as_string);
    }
}
