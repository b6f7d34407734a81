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
mod tests;
