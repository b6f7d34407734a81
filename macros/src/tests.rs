//! Unit tests of `#[traced]`: expansions checked token by token, errors
//! pointing at the right tokens.

use super::*;
use quote::quote;

fn tokens(src: &str) -> TokenStream2 {
    src.parse()
        .unwrap_or_else(|e| panic!("test input does not lex: {e}\n{src}"))
}

/// Expands successfully and parses the result as a function.
fn expand_ok(attr: &str, item: &str) -> ItemFn {
    let out = expand(tokens(attr), tokens(item));
    let text = out.to_string();
    assert!(
        !text.contains("compile_error"),
        "unexpected error for #[traced({attr})] {item}:\n{text}"
    );
    syn::parse2(out).unwrap_or_else(|e| panic!("expansion is not a fn: {e}\n{text}"))
}

/// The errors for a misuse: (message, source text the error points at).
fn errors(attr: &str, item: &str) -> Vec<(String, Option<String>)> {
    let err = match try_expand(tokens(attr), tokens(item)) {
        Ok(out) => panic!("expected an error for #[traced({attr})] {item}, got:\n{out}"),
        Err(err) => err,
    };
    // The public entry point turns them into compile_error!s and keeps
    // the item.
    let out = expand(tokens(attr), tokens(item)).to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(
        out.contains(&tokens(item).to_string()),
        "item not kept: {out}"
    );
    err.into_iter()
        .map(|e| (e.to_string(), e.span().source_text()))
        .collect()
}

/// The single error for a misuse; asserts its message contains `needle`
/// and it points at `at`.
fn assert_error(attr: &str, item: &str, needle: &str, at: &str) {
    let errs = errors(attr, item);
    assert_eq!(errs.len(), 1, "{errs:?}");
    let (msg, text) = &errs[0];
    assert!(msg.contains(needle), "message {msg:?} lacks {needle:?}");
    assert_eq!(
        text.as_deref(),
        Some(at),
        "error for {msg:?} points at the wrong tokens"
    );
}

#[cfg(feature = "enable")]
fn stmt_text(func: &ItemFn, i: usize) -> String {
    func.block.stmts[i].to_token_stream().to_string()
}

// ---- both feature settings: the output is a function with the same
// signature, and the body keeps every original statement.

#[test]
fn signature_is_kept() {
    let cases = [
            "pub fn add(a: u32, b: u32) -> u32 { a + b }",
            "fn generic<T: Clone, const N: usize>(x: &[T; N]) -> Vec<T> where T: Default { x.to_vec() }",
            "pub(crate) unsafe extern \"C\" fn raw(p: *const u8) -> u8 { *p }",
            "fn method(&mut self, x: i32) -> &mut Self { self.x = x; self }",
            "fn by_value(self: Box<Self>) {}",
            "async fn fetch<'a>(&'a self, url: &'a str) -> Result<&'a str, Error> { Ok(url) }",
            "#[inline] #[must_use] fn attrs(x: u8) -> u8 { x }",
        ];
    for item in cases {
        let before: ItemFn = syn::parse_str(item).unwrap();
        let after = expand_ok("", item);
        assert_eq!(
            before.sig.to_token_stream().to_string(),
            after.sig.to_token_stream().to_string(),
            "{item}"
        );
        assert_eq!(before.attrs.len(), after.attrs.len(), "{item}");
        assert_eq!(
            before.vis.to_token_stream().to_string(),
            after.vis.to_token_stream().to_string()
        );
    }
}

#[test]
fn inner_attributes_stay_inside_the_body() {
    let func = expand_ok("", "fn f() { #![allow(unused)] let x = 1; }");
    let text = func.to_token_stream().to_string();
    assert!(text.contains("# ! [allow (unused)]"), "{text}");
}

// ---- feature `enable` off: the item comes back as written.

#[cfg(not(feature = "enable"))]
#[test]
fn disabled_returns_the_item_unchanged() {
    for (attr, item) in [
        ("", "fn f(x: u32) -> u32 { x + 1 }"),
        (
            "name = \"n\", category = \"c\", args(x)",
            "fn f(x: u32) -> u32 { x + 1 }",
        ),
        (
            "",
            "async fn f(&self) -> Result<(), E> { g().await?; Ok(()) }",
        ),
    ] {
        let out = expand(tokens(attr), tokens(item));
        assert_eq!(out.to_string(), tokens(item).to_string());
    }
}

// ---- feature `enable` on: sync functions.

#[cfg(feature = "enable")]
#[test]
fn sync_default_name_and_category() {
    let func = expand_ok("", "fn compute(x: u32) -> u32 { let y = x + 1; y }");
    assert_eq!(func.block.stmts.len(), 3);
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("default" , "compute") ;"#
    );
    assert_eq!(stmt_text(&func, 1), "let y = x + 1 ;");
    assert_eq!(stmt_text(&func, 2), "y");
}

#[cfg(feature = "enable")]
#[test]
fn sync_custom_name_category_and_args() {
    let expected = r#":: ringtrace :: trace_scope ! ("io" , "custom" , a = a , b = * b) ;"#;
    for attr in [
        r#"name = "custom", category = "io", args(a, b)"#,
        r#"args(a, b), category = "io", name = "custom","#,
    ] {
        let func = expand_ok(attr, "fn f(a: u32, b: &str, c: bool) { let _ = c; }");
        assert_eq!(stmt_text(&func, 0), expected, "{attr}");
    }
    let func = expand_ok(r#"category = "io""#, "fn read() {}");
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("io" , "read") ;"#
    );
    let func = expand_ok(r#"name = "x""#, "fn read() {}");
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("default" , "x") ;"#
    );
    // Raw strings are passed through as written.
    let func = expand_ok(r##"name = r#"a "quoted" name"#"##, "fn read() {}");
    assert!(stmt_text(&func, 0).contains(r##"r#"a "quoted" name"#"##));
}

#[cfg(feature = "enable")]
#[test]
fn sync_args_from_patterns_and_self() {
    let func = expand_ok(
        "args(self, a, b, inner)",
        "fn f(self, (a, mut b): (u8, u8), Wrapper { inner, .. }: Wrapper) {}",
    );
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("default" , "f" , self = self , a = a , b = b , inner = inner) ;"#
    );
    // References are recorded by what they point to (`TraceValue` is not
    // implemented for `&mut T`).
    let func = expand_ok(
        "args(self, buf, s, b)",
        "fn f(&mut self, buf: &mut Vec<u8>, s: &str, b: Box<u8>) {}",
    );
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("default" , "f" , self = * self , buf = * buf , s = * s , b = b) ;"#
    );
    let func = expand_ok("args(self)", "fn f(&self) {}");
    assert!(stmt_text(&func, 0).contains("self = * self"));
    let func = expand_ok("args(self)", "fn f(self: Box<Self>) {}");
    assert!(stmt_text(&func, 0).contains("self = self"));
}

#[cfg(feature = "enable")]
#[test]
fn sync_raw_identifier_name() {
    let func = expand_ok("", "fn r#match() {}");
    assert_eq!(
        stmt_text(&func, 0),
        r#":: ringtrace :: trace_scope ! ("default" , "match") ;"#
    );
}

#[cfg(feature = "enable")]
#[test]
fn sync_methods_generics_unsafe_and_question_mark() {
    let cases = [
            ("fn m(&self) -> u32 { self.x }", "m"),
            ("fn m(&mut self) { self.x += 1; }", "m"),
            ("fn m(self) -> Self { self }", "m"),
            ("fn g<T: std::fmt::Debug>(t: T) -> String where T: Clone { format!(\"{t:?}\") }", "g"),
            ("unsafe fn u(p: *const u8) -> u8 { *p }", "u"),
            ("fn q(s: &str) -> Result<u32, std::num::ParseIntError> { let v = s.parse::<u32>()?; if v > 9 { return Ok(0); } Ok(v) }", "q"),
        ];
    for (item, name) in cases {
        let before: ItemFn = syn::parse_str(item).unwrap();
        let func = expand_ok("", item);
        assert_eq!(
            stmt_text(&func, 0),
            format!(r#":: ringtrace :: trace_scope ! ("default" , "{name}") ;"#),
            "{item}"
        );
        // The original statements follow, in the same block (no closure,
        // so `return` and `?` still leave the function).
        let rest: Vec<String> = func.block.stmts[1..]
            .iter()
            .map(|s| s.to_token_stream().to_string())
            .collect();
        let orig: Vec<String> = before
            .block
            .stmts
            .iter()
            .map(|s| s.to_token_stream().to_string())
            .collect();
        assert_eq!(rest, orig, "{item}");
    }
}

// ---- feature `enable` on: async functions.

/// The body of an instrumented async fn: (callsite macro call, fake
/// return edge or "", original statements).
#[cfg(feature = "enable")]
fn async_parts(func: &ItemFn) -> (String, String, Vec<String>) {
    assert!(func.sig.asyncness.is_some(), "stays an async fn");
    assert_eq!(func.block.stmts.len(), 1, "the body is one expression");
    let syn::Stmt::Expr(Expr::Await(awaited), None) = &func.block.stmts[0] else {
        panic!(
            "body is not `<TracedFuture>.await`: {}",
            func.block.to_token_stream()
        );
    };
    let Expr::Call(call) = &*awaited.base else {
        panic!("not a call: {}", awaited.base.to_token_stream())
    };
    assert_eq!(
        call.func.to_token_stream().to_string(),
        ":: ringtrace :: __private :: TracedFuture :: new"
    );
    assert_eq!(call.args.len(), 2);
    let callsite = call.args[0].to_token_stream().to_string();
    let Expr::Async(block) = &call.args[1] else {
        panic!("not an async block: {}", call.args[1].to_token_stream())
    };
    assert!(
        block.capture.is_some(),
        "the async block must be `async move`"
    );
    let mut stmts: Vec<String> = block
        .block
        .stmts
        .iter()
        .map(|s| s.to_token_stream().to_string())
        .collect();
    let fake = if stmts
        .first()
        .is_some_and(|s| s.contains("__ringtrace_return"))
    {
        stmts.remove(0)
    } else {
        String::new()
    };
    (callsite, fake, stmts)
}

#[cfg(feature = "enable")]
#[test]
fn async_fn_body_runs_in_a_traced_future() {
    let item = "async fn fetch(&self, url: &str) -> Result<Vec<u8>, Error> { let b = get(url).await?; if b.is_empty() { return Err(Error::Empty); } Ok(b) }";
    let before: ItemFn = syn::parse_str(item).unwrap();
    let func = expand_ok("", item);
    let (callsite, fake, stmts) = async_parts(&func);
    assert_eq!(
        callsite,
        r#":: ringtrace :: __callsite ! ("default" , "fetch")"#
    );
    assert!(
        fake.contains(":: core :: option :: Option :: < Result < Vec < u8 > , Error > > :: None"),
        "{fake}"
    );
    let orig: Vec<String> = before
        .block
        .stmts
        .iter()
        .map(|s| s.to_token_stream().to_string())
        .collect();
    assert_eq!(stmts, orig);
}

#[cfg(feature = "enable")]
#[test]
fn async_fake_return_types() {
    let cases = [
        ("async fn f() { g().await; }", Some("()")),
        ("async fn f(self) -> Self { self }", Some("Self")),
        (
            "async fn f<'a, T: Clone>(x: &'a T) -> &'a T { x }",
            Some("& 'a T"),
        ),
        ("async fn f() -> impl Iterator<Item = u8> { 0..3 }", None),
        ("async fn f() -> Vec<impl Display> { vec![1] }", None),
        ("async fn f() -> ! { loop {} }", None),
    ];
    for (item, ty) in cases {
        let func = expand_ok(r#"category = "net""#, item);
        let (callsite, fake, _) = async_parts(&func);
        assert_eq!(callsite, r#":: ringtrace :: __callsite ! ("net" , "f")"#);
        match ty {
            Some(ty) => {
                let expected = format!(
                        "if let :: core :: option :: Option :: Some (__ringtrace_return) = :: core :: option :: \
                         Option :: < {ty} > :: None {{ return __ringtrace_return ; }}"
                    );
                assert_eq!(fake, expected, "{item}");
            }
            None => assert_eq!(fake, "", "{item}"),
        }
    }
}

#[cfg(feature = "enable")]
#[test]
fn async_methods_and_unsafe() {
    for item in [
        "async fn m(&self) -> u32 { self.x }",
        "async fn m(&mut self) { self.x += 1; }",
        "async fn m(self) -> Self { self }",
        "pub async unsafe fn u(p: *const u8) -> u8 { *p }",
        "async fn g<T: Send>(t: T) -> T { t }",
    ] {
        let func = expand_ok(r#"name = "custom""#, item);
        let (callsite, _, stmts) = async_parts(&func);
        assert_eq!(
            callsite, r#":: ringtrace :: __callsite ! ("default" , "custom")"#,
            "{item}"
        );
        assert_eq!(stmts.len(), 1, "{item}");
    }
}

// ---- misuse: errors in both feature settings.

#[test]
fn unknown_argument() {
    assert_error(
        r#"level = "info""#,
        "fn f() {}",
        "unknown #[traced] argument `level`",
        "level",
    );
    assert_error(
        "skip(a)",
        "fn f(a: u8) {}",
        "expected `name = \"...\"`, `category = \"...\"` or `args(...)`",
        "skip",
    );
    assert_error(
        r#"name = "a", foo::bar = "b""#,
        "fn f() {}",
        "unknown #[traced] argument `foo::bar`",
        "foo::bar",
    );
}

#[test]
fn non_literal_values() {
    assert_error(
        "name = some_const",
        "fn f() {}",
        "expected a string literal: `name = \"...\"`",
        "some_const",
    );
    assert_error(
        "category = 5",
        "fn f() {}",
        "expected a string literal: `category = \"...\"`",
        "5",
    );
    assert_error(
        "name = concat!(\"a\", \"b\")",
        "fn f() {}",
        "expected a string literal",
        "concat!(\"a\", \"b\")",
    );
    assert_error(
        "name = b\"x\"",
        "fn f() {}",
        "expected a string literal",
        "b\"x\"",
    );
    let errs = errors("name", "fn f() {}");
    assert!(errs[0].0.contains("expected `=`"), "{errs:?}");
    assert_error(
        "args = \"a\"",
        "fn f(a: u8) {}",
        "expected a parenthesized list of parameter names",
        "args",
    );
    assert_error("args()", "fn f(a: u8) {}", "`args()` is empty", "args()");
}

#[test]
fn duplicate_arguments() {
    assert_error(
        r#"name = "a", name = "b""#,
        "fn f() {}",
        "duplicate `name` argument",
        "name",
    );
    assert_error(
        r#"category = "a", category = "b""#,
        "fn f() {}",
        "duplicate `category`",
        "category",
    );
    assert_error(
        "args(a), args(a)",
        "fn f(a: u8) {}",
        "duplicate `args` argument",
        "args",
    );
    assert_error(
        "args(a, a)",
        "fn f(a: u8) {}",
        "`a` is listed twice in `args(...)`",
        "a",
    );
}

#[test]
fn arg_that_is_not_a_parameter() {
    assert_error(
        "args(a, c)",
        "fn f(a: u8, b: u8) {}",
        "`c` is not a parameter of `f`; the parameters are `a`, `b`",
        "c",
    );
    assert_error(
        "args(x)",
        "fn f() {}",
        "`x` is not a parameter of `f`; `f` has no named parameters",
        "x",
    );
    assert_error(
        "args(self)",
        "fn f(a: u8) {}",
        "`self` is not a parameter of `f`",
        "self",
    );
    // Every bad name is reported.
    let errs = errors("args(x, y)", "fn f(a: u8) {}");
    let at: Vec<_> = errs.iter().map(|(_, at)| at.as_deref()).collect();
    assert_eq!(at, [Some("x"), Some("y")]);
    // Names are compared as written.
    assert_error("args(A)", "fn f(a: u8) {}", "`A` is not a parameter", "A");
}

#[test]
fn too_many_args() {
    let params: Vec<String> = (0..13).map(|i| format!("p{i}: u8")).collect();
    let names: Vec<String> = (0..13).map(|i| format!("p{i}")).collect();
    let item = format!("fn f({}) {{}}", params.join(", "));
    assert_error(
        &format!("args({})", names.join(", ")),
        &item,
        "at most 12 args",
        "args",
    );
    expand_ok(&format!("args({})", names[..12].join(", ")), &item);
}

#[test]
fn args_on_async_fn() {
    assert_error(
        "args(url)",
        "async fn f(url: &str) {}",
        "#[traced(args(...))] is not supported on an `async fn` yet",
        "args",
    );
}

#[test]
fn const_fn() {
    assert_error(
        "",
        "pub const fn f() -> u8 { 1 }",
        "cannot be applied to a `const fn`",
        "const",
    );
    assert_error(
        r#"name = "x""#,
        "const unsafe fn f() {}",
        "remove `const` or the attribute",
        "const",
    );
}

#[test]
fn not_a_function() {
    assert_error(
        "",
        "struct S { a: u8 }",
        "can only be applied to functions and methods, not to a struct",
        "struct",
    );
    assert_error("", "pub enum E { A }", "not to an enum", "enum");
    assert_error(
        "",
        "impl S { fn f(&self) {} }",
        "not to an impl block; put it on the methods to trace",
        "impl",
    );
    assert_error("", "static X: u8 = 1;", "not to a static", "static");
    assert_error("", "mod m {}", "not to a module", "mod");
    assert_error("", "trait T { fn f(&self); }", "not to a trait", "trait");
    assert_error("", "fn f(&self) -> u8;", "`f` has none", "f");
}

#[test]
fn attribute_and_item_errors_are_both_reported() {
    let errs = errors("bogus", "const fn f() {}");
    let msgs: Vec<&str> = errs.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(errs.len(), 2, "{msgs:?}");
    assert!(msgs[0].contains("unknown #[traced] argument `bogus`"));
    assert!(msgs[1].contains("`const fn`"));
    let errs = errors("bogus", "struct S;");
    assert_eq!(errs.len(), 2, "{errs:?}");
}

#[test]
fn helpers() {
    assert!(mentions_impl(quote!(Box<dyn Fn() -> impl Sized>)));
    assert!(!mentions_impl(quote!(Result<Implementation, Impl>)));
    assert!(is_never(&parse_quote!(!)));
    assert!(!is_never(&parse_quote!(())));
}
