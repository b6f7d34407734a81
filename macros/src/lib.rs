//! Procedural macros of [ringtrace]: the [`#[traced]`](macro@traced) attribute,
//! which records a trace slice over every call of a function.
//!
//! Use it through the SDK, as `#[ringtrace::traced]`, not from this crate
//! directly: the generated code names items of the SDK by the absolute path
//! `::ringtrace::...`, so the crate using the attribute must depend on
//! `ringtrace` under that name.
//!
//! # Features
//!
//! - `enable` (turned on by the SDK's default `enable` feature): instrument
//!   the function. Without it the attribute still checks its arguments (so a
//!   typo fails the build either way) and then returns the function exactly
//!   as written, so tracing compiles out completely.
//!
//! [ringtrace]: https://docs.rs/ringtrace

use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use quote::{quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    parse_quote, Error, Expr, ExprLit, FnArg, Ident, Item, ItemFn, Lit, LitStr, Pat, ReturnType,
    Signature, Token, TraitItemFn, Type,
};

/// The category of a function whose attribute names none.
const DEFAULT_CATEGORY: &str = "default";

/// The most arguments one event can carry (the SDK's `ArgList` is implemented
/// for tuples of up to 12 references).
const MAX_ARGS: usize = 12;

/// Records a trace slice covering each call of the function.
///
/// Put it on a free function, a method (taking `self`, `&self`, `&mut self`
/// or none), a generic function, an `unsafe fn` or an `async fn`. Returning
/// with `return` or `?` ends the slice like any other exit, and so does a
/// panic unwinding out of the function.
///
/// # Arguments
///
/// All are optional and may be combined in any order, separated by commas:
///
/// | Argument | Meaning | Default |
/// | --- | --- | --- |
/// | `name = "..."` | Name of the slice (a string literal) | the function's identifier, e.g. `"parse"` |
/// | `category = "..."` | Category of the slice (a string literal), for turning groups of events on and off | `"default"` |
/// | `args(a, b, ...)` | Parameters (by name; `self` too) whose values are recorded as arguments of the slice, borrowed, when the slice begins. Each must implement `ringtrace::TraceValue`; a reference parameter (`&self`, `x: &mut T`) is recorded by the value it points to. At most 12. Not supported on `async fn` yet. | none |
///
/// # What it generates
///
/// A synchronous function gets a scope at the top of its body, so the slice
/// lasts until the function returns:
///
/// ```ignore
/// #[ringtrace::traced(category = "io", args(path))]
/// fn load(path: &str) -> std::io::Result<String> { std::fs::read_to_string(path) }
/// // becomes
/// fn load(path: &str) -> std::io::Result<String> {
///     ::ringtrace::trace_scope!("io", "load", path = *path);
///     std::fs::read_to_string(path)
/// }
/// ```
///
/// An `async fn` keeps its signature; its body runs inside a
/// `ringtrace::TracedFuture`, which records the future's whole life (first
/// poll to completion, or drop) as an async slice and each poll as a slice on
/// the thread that ran it. `return` and `?` in the body work as before and
/// `self` is captured like any other parameter. `args(...)` is not supported
/// on an `async fn` yet; record values from the body with
/// `ringtrace::trace_instant!` instead.
///
/// # Errors
///
/// Compilation fails with a message pointing at the culprit for: an unknown
/// argument, a value that is not a string literal, a repeated argument, an
/// `args(...)` entry that is not a parameter, `args(...)` on an `async fn`,
/// the attribute on something other than a function with a body, and a
/// `const fn` (events cannot be recorded during const evaluation).
///
/// # Examples
///
/// These examples are not compiled: this crate cannot depend on the
/// `ringtrace` SDK that the generated code refers to. The SDK's own tests
/// run equivalent code.
///
/// ```ignore
/// use ringtrace::traced;
///
/// // A slice named "checksum" in category "default".
/// #[traced]
/// fn checksum(data: &[u8]) -> u32 {
///     data.iter().map(|&b| u32::from(b)).sum()
/// }
///
/// // A custom name and category, and the parameters recorded as arguments.
/// #[traced(name = "read config", category = "io", args(path, retries))]
/// fn read_config(path: &str, retries: u32) -> std::io::Result<String> {
///     let text = std::fs::read_to_string(path)?;
///     Ok(text)
/// }
///
/// struct Cache {
///     hits: u64,
/// }
///
/// impl Cache {
///     // Methods work with any receiver; `self` may be listed in args(...)
///     // when its type implements `TraceValue`.
///     #[traced(category = "cache")]
///     fn lookup(&mut self, key: u64) -> Option<u64> {
///         self.hits += 1;
///         (key % 2 == 0).then_some(key)
///     }
///
///     // An async method: one async slice per call, plus a slice per poll.
///     #[traced(category = "net")]
///     async fn fetch(&self, url: &str) -> Result<Vec<u8>, std::io::Error> {
///         let body = download(url).await?;
///         Ok(body)
///     }
/// }
/// # async fn download(_: &str) -> Result<Vec<u8>, std::io::Error> { Ok(vec![]) }
/// ```
#[proc_macro_attribute]
pub fn traced(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand(attr.into(), item.into()).into()
}

/// The old name of [`#[traced]`](macro@traced): the same attribute. Renamed
/// because `trace` is also `tracing`'s `trace!` macro, and a module that
/// glob-imports both crates could not use either.
#[deprecated(
    since = "0.1.0",
    note = "renamed `#[ringtrace::traced]` (`trace` meets `tracing::trace!` in glob imports)"
)]
#[proc_macro_attribute]
pub fn trace(
    attr: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand(attr.into(), item.into()).into()
}

/// The whole attribute: the instrumented function, the function unchanged
/// (feature `enable` off), or `compile_error!`s followed by the item as
/// written (so that its uses don't add errors of their own).
fn expand(attr: TokenStream2, item: TokenStream2) -> TokenStream2 {
    match try_expand(attr, item.clone()) {
        Ok(tokens) => tokens,
        Err(err) => {
            let mut tokens = err.into_compile_error();
            tokens.extend(item);
            tokens
        }
    }
}

fn try_expand(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let options = parse_options(attr);
    // Check the function even when the arguments are bad (against no
    // arguments then), so that every problem is reported at once.
    let func = parse_fn(item.clone()).and_then(|func| {
        let no_options = Options::default();
        check(options.as_ref().unwrap_or(&no_options), &func.sig)?;
        Ok(func)
    });
    let (options, func) = match (options, func) {
        (Ok(options), Ok(func)) => (options, func),
        (Err(mut err), Err(other)) => {
            err.combine(other);
            return Err(err);
        }
        (Err(err), Ok(_)) | (Ok(_), Err(err)) => return Err(err),
    };
    if cfg!(feature = "enable") {
        Ok(instrument(options, func))
    } else {
        Ok(item)
    }
}

/// The parsed attribute arguments.
#[derive(Default)]
struct Options {
    name: Option<LitStr>,
    category: Option<LitStr>,
    args: Option<ArgsOption>,
}

/// `args(a, b, ...)`.
struct ArgsOption {
    /// The `args` keyword, for errors about the list as a whole.
    keyword: Span,
    names: Vec<Ident>,
}

fn parse_options(attr: TokenStream2) -> syn::Result<Options> {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") || meta.path.is_ident("category") {
            let key = if meta.path.is_ident("name") {
                "name"
            } else {
                "category"
            };
            let slot = if key == "name" {
                &mut options.name
            } else {
                &mut options.category
            };
            if slot.is_some() {
                return Err(meta.error(format_args!("duplicate `{key}` argument")));
            }
            let value: Expr = meta.value()?.parse()?;
            match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(lit),
                    attrs,
                }) if attrs.is_empty() => *slot = Some(lit),
                other => {
                    return Err(Error::new_spanned(
                        other,
                        format_args!("expected a string literal: `{key} = \"...\"`"),
                    ))
                }
            }
        } else if meta.path.is_ident("args") {
            if options.args.is_some() {
                return Err(meta.error("duplicate `args` argument"));
            }
            let keyword = meta.path.span();
            if !meta.input.peek(syn::token::Paren) {
                return Err(meta
                    .error("expected a parenthesized list of parameter names: `args(a, b, ...)`"));
            }
            let content;
            syn::parenthesized!(content in meta.input);
            let names =
                Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, Ident::parse_any)?;
            if names.is_empty() {
                return Err(meta.error(
                    "`args()` is empty: list parameter names, e.g. `args(a, b)`, or remove it",
                ));
            }
            options.args = Some(ArgsOption {
                keyword,
                names: names.into_iter().collect(),
            });
        } else {
            let key = meta.path.to_token_stream().to_string().replace(' ', "");
            return Err(meta.error(format_args!(
                "unknown #[traced] argument `{key}`; expected `name = \"...\"`, `category = \"...\"` or `args(...)`"
            )));
        }
        Ok(())
    });
    parser.parse2(attr)?;
    Ok(options)
}

/// The annotated item as a function with a body, or an error saying what it
/// is instead.
fn parse_fn(item: TokenStream2) -> syn::Result<ItemFn> {
    if let Ok(func) = syn::parse2::<ItemFn>(item.clone()) {
        return Ok(func);
    }
    if let Ok(decl) = syn::parse2::<TraitItemFn>(item.clone()) {
        if decl.default.is_none() {
            return Err(Error::new(
                decl.sig.ident.span(),
                format_args!(
                    "#[traced] needs a function body, and `{}` has none; put #[traced] on the functions that \
                     implement it instead",
                    decl.sig.ident
                ),
            ));
        }
    }
    let (span, what) = match syn::parse2::<Item>(item) {
        Ok(Item::Struct(i)) => (i.struct_token.span, "a struct"),
        Ok(Item::Enum(i)) => (i.enum_token.span, "an enum"),
        Ok(Item::Union(i)) => (i.union_token.span, "a union"),
        Ok(Item::Trait(i)) => (
            i.trait_token.span,
            "a trait; put it on the trait's methods that have a body",
        ),
        Ok(Item::Impl(i)) => (
            i.impl_token.span,
            "an impl block; put it on the methods to trace",
        ),
        Ok(Item::Mod(i)) => (i.mod_token.span, "a module"),
        Ok(Item::Const(i)) => (i.const_token.span, "a constant"),
        Ok(Item::Static(i)) => (i.static_token.span, "a static"),
        Ok(Item::Type(i)) => (i.type_token.span, "a type alias"),
        Ok(Item::Use(i)) => (i.use_token.span, "a `use` declaration"),
        Ok(Item::ExternCrate(i)) => (i.extern_token.span, "an `extern crate` declaration"),
        Ok(Item::ForeignMod(i)) => (
            i.abi.extern_token.span,
            "an `extern` block; put it on a Rust function",
        ),
        Ok(Item::Macro(i)) => (i.mac.path.span(), "a macro invocation"),
        _ => (Span::call_site(), "this item"),
    };
    Err(Error::new(
        span,
        format_args!("#[traced] can only be applied to functions and methods, not to {what}"),
    ))
}

/// Checks what the signature and the options must agree on. Every problem is
/// reported, not only the first.
fn check(options: &Options, sig: &Signature) -> syn::Result<()> {
    let mut errors: Option<Error> = None;
    let mut report = |err: Error| match &mut errors {
        Some(errors) => errors.combine(err),
        None => errors = Some(err),
    };
    if let Some(constness) = &sig.constness {
        report(Error::new(
            constness.span,
            "#[traced] cannot be applied to a `const fn`: events cannot be recorded during const evaluation; \
             remove `const` or the attribute",
        ));
    }
    if let Some(args) = &options.args {
        if sig.asyncness.is_some() {
            report(Error::new(
                args.keyword,
                "#[traced(args(...))] is not supported on an `async fn` yet; record the values from the body with \
                 `ringtrace::trace_instant!` instead",
            ));
        } else {
            let params = param_names(sig);
            let mut seen: Vec<String> = Vec::new();
            for name in &args.names {
                let name_str = name.to_string();
                if !params.contains(&name_str) {
                    let known = if params.is_empty() {
                        format!("`{}` has no named parameters", sig.ident)
                    } else {
                        let list: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
                        format!("the parameters are {}", list.join(", "))
                    };
                    report(Error::new(
                        name.span(),
                        format_args!(
                            "`{name_str}` is not a parameter of `{}`; {known}",
                            sig.ident
                        ),
                    ));
                } else if seen.contains(&name_str) {
                    report(Error::new(
                        name.span(),
                        format_args!("`{name_str}` is listed twice in `args(...)`"),
                    ));
                } else {
                    seen.push(name_str);
                }
            }
            if args.names.len() > MAX_ARGS {
                report(Error::new(
                    args.keyword,
                    format_args!(
                        "an event holds at most {MAX_ARGS} args; `args(...)` lists {}",
                        args.names.len()
                    ),
                ));
            }
        }
    }
    errors.map_or(Ok(()), Err)
}

/// The names `args(...)` may refer to: `self` and every identifier a
/// parameter pattern binds.
fn param_names(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
        }
    }
    names
}

fn collect_bindings(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(p) => {
            names.push(p.ident.to_string());
            if let Some((_, sub)) = &p.subpat {
                collect_bindings(sub, names);
            }
        }
        Pat::Tuple(p) => p.elems.iter().for_each(|e| collect_bindings(e, names)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|e| collect_bindings(e, names)),
        Pat::Slice(p) => p.elems.iter().for_each(|e| collect_bindings(e, names)),
        Pat::Struct(p) => p
            .fields
            .iter()
            .for_each(|f| collect_bindings(&f.pat, names)),
        Pat::Reference(p) => collect_bindings(&p.pat, names),
        Pat::Paren(p) => collect_bindings(&p.pat, names),
        Pat::Type(p) => collect_bindings(&p.pat, names),
        // Every alternative binds the same names.
        Pat::Or(p) => p
            .cases
            .iter()
            .take(1)
            .for_each(|c| collect_bindings(c, names)),
        _ => {}
    }
}

/// The instrumented function (feature `enable` on, options checked).
fn instrument(options: Options, mut func: ItemFn) -> TokenStream2 {
    let ident = &func.sig.ident;
    let name = options
        .name
        .unwrap_or_else(|| LitStr::new(&ident.unraw().to_string(), ident.span()));
    let category = options
        .category
        .unwrap_or_else(|| LitStr::new(DEFAULT_CATEGORY, Span::call_site()));

    if func.sig.asyncness.is_some() {
        // The body becomes an async block, so `return` and `?` in it now
        // leave that block; the fake return edge gives the block the
        // function's return type before the body is checked, so `?`
        // conversions, coercions at `return` and errors behave as before.
        let fake_return = fake_return_edge(&func.sig.output);
        let stmts = std::mem::take(&mut func.block.stmts);
        *func.block = parse_quote! {{
            ::ringtrace::__private::TracedFuture::new(
                ::ringtrace::__callsite!(#category, #name),
                async move {
                    #fake_return
                    #(#stmts)*
                },
            )
            .await
        }};
    } else {
        let names = options.args.map(|args| args.names).unwrap_or_default();
        let values: Vec<TokenStream2> = names
            .iter()
            .map(|name| arg_value(&func.sig, name))
            .collect();
        func.block.stmts.insert(
            0,
            parse_quote! {
                ::ringtrace::trace_scope!(#category, #name #(, #names = #values)*);
            },
        );
    }
    func.into_token_stream()
}

/// The value recorded for the parameter `name`: the parameter itself, or
/// what it points to when it is a reference (`&self`, `&mut self`,
/// `x: &mut T`), since `TraceValue` is implemented for `&T` but not for
/// `&mut T`. Either way `trace_scope!` only borrows it.
fn arg_value(sig: &Signature, name: &Ident) -> TokenStream2 {
    let is_reference = sig.inputs.iter().any(|input| match input {
        FnArg::Receiver(receiver) => name == "self" && receiver.reference.is_some(),
        FnArg::Typed(typed) => {
            matches!(&*typed.pat, Pat::Ident(p) if p.ident == *name && p.by_ref.is_none() && p.subpat.is_none())
                && matches!(&*typed.ty, Type::Reference(_))
        }
    });
    if is_reference {
        quote_spanned!(name.span()=> *#name)
    } else {
        name.to_token_stream()
    }
}

/// A `return` that is never taken, of a value of the declared return type,
/// for the start of an async block: it fixes the block's output type before
/// the body is type-checked. Without it the output would be inferred from the
/// body, so `?` could not tell which error type to convert to and `return`s
/// of different types would not coerce (`Box<dyn Error>`).
///
/// Empty when the type cannot be written in a body: `impl Trait` (inferred
/// from the body then) and `!`.
fn fake_return_edge(output: &ReturnType) -> TokenStream2 {
    let ty: Type = match output {
        ReturnType::Default => parse_quote!(()),
        ReturnType::Type(_, ty) if is_never(ty) || mentions_impl(ty.to_token_stream()) => {
            return TokenStream2::new()
        }
        ReturnType::Type(_, ty) => (**ty).clone(),
    };
    // Matching on `None` rather than binding a diverging expression keeps the
    // code free of `unreachable_code`, which a crate may `forbid`.
    quote_spanned! {ty.span()=>
        if let ::core::option::Option::Some(__ringtrace_return) = ::core::option::Option::<#ty>::None {
            return __ringtrace_return;
        }
    }
}

fn is_never(ty: &Type) -> bool {
    match ty {
        Type::Never(_) => true,
        Type::Group(g) => is_never(&g.elem),
        Type::Paren(p) => is_never(&p.elem),
        _ => false,
    }
}

/// Whether the tokens contain `impl` (in a type: an `impl Trait`).
fn mentions_impl(tokens: TokenStream2) -> bool {
    tokens.into_iter().any(|tt| match tt {
        TokenTree::Ident(ident) => ident == "impl",
        TokenTree::Group(group) => mentions_impl(group.stream()),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
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
            fake.contains(
                ":: core :: option :: Option :: < Result < Vec < u8 > , Error > > :: None"
            ),
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
}
