//! `#[mpi]`: export one of fm-mpi's functions under MPI's two names.
//!
//! Written on `fn PMPI_x(args) -> c_int { body }` (plain Rust that rustfmt
//! formats), it makes that function `#[no_mangle] pub unsafe extern "C"`,
//! and adds `MPI_x`, which calls `PMPI_x`: MPI's profiling interface, where
//! a tool that defines `MPI_x` itself reaches the library through `PMPI_x`.
//!
//! MPI-4.0's large-count functions: where the signature names the type
//! `IntOrCount` or `AintOrCount`, the function is written once and
//! exported twice, as `PMPI_x`/`MPI_x` with them read as C's `int` and
//! `MPI_Aint`, and as `PMPI_x_c`/`MPI_x_c` with both read as `MPI_Count`. In the `_c` copy the
//! body's `"MPI_x"` string literals and the identifier `PMPI_x` name the
//! `_c` function instead, so its error messages say which one was called.
//! The body must type-check with either integer type (the library's
//! count helpers take both; `ffi::CountArg`).

use proc_macro::TokenStream;
use proc_macro2::{Group, Ident, Literal, TokenTree};
use quote::{format_ident, quote};
use syn::{parse_macro_input, FnArg, ItemFn, Pat};

/// The placeholder types of a large-count function, each with what it
/// is read as in the classic form and in the `_c` form (module docs).
const PLACEHOLDERS: [(&str, &str, &str); 2] = [
    ("IntOrCount", "c_int", "MPI_Count"),
    ("AintOrCount", "isize", "MPI_Count"),
];

/// Export `PMPI_x` and `MPI_x`, and `_c` forms where the signature names
/// `IntOrCount` or `AintOrCount` (module docs).
#[proc_macro_attribute]
pub fn mpi(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(proc_macro2::Span::call_site(), "#[mpi] takes no arguments")
            .to_compile_error()
            .into();
    }
    let f = parse_macro_input!(item as ItemFn);
    let sig = &f.sig;
    let sig: Vec<TokenTree> = quote!(#sig).into_iter().collect();
    let large = PLACEHOLDERS.iter().any(|(p, ..)| names(sig.clone(), p));
    let pname = f.sig.ident.to_string();
    let forms = match large {
        false => Ok(vec![f]),
        true => [false, true]
            .iter()
            .map(|&c| syn::parse2::<ItemFn>(rewrite(quote!(#f), c, &pname)))
            .collect::<syn::Result<Vec<_>>>(),
    };
    let mut forms = match forms {
        Ok(forms) => forms,
        Err(e) => return e.to_compile_error().into(),
    };
    if large {
        // A cast or conversion one form needs is the identity in the other.
        for f in &mut forms {
            f.attrs.push(syn::parse_quote!(
                #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
            ));
        }
    }
    let mut out = proc_macro2::TokenStream::new();
    for f in forms {
        match expand(f) {
            Ok(t) => out.extend(t),
            Err(e) => out.extend(e.to_compile_error()),
        }
    }
    out.into()
}

/// Whether `tokens` contain the identifier `name`.
fn names(tokens: Vec<TokenTree>, name: &str) -> bool {
    tokens.into_iter().any(|t| match t {
        TokenTree::Ident(i) => i == name,
        TokenTree::Group(g) => names(g.stream().into_iter().collect(), name),
        _ => false,
    })
}

/// `tokens` with the placeholder types read as the classic form's or,
/// with `c`, as the `_c` form's, where `PMPI_x` and the literal `"MPI_x"`
/// are renamed to the `_c` function's too.
fn rewrite(tokens: proc_macro2::TokenStream, c: bool, pname: &str) -> proc_macro2::TokenStream {
    let name = &pname[1..];
    let literal = format!("\"{name}\"");
    let suffix = if c { "_c" } else { "" };
    tokens
        .into_iter()
        .map(|t| match t {
            TokenTree::Ident(i) => match PLACEHOLDERS.iter().find(|(p, ..)| i == p) {
                Some((_, classic, large)) => {
                    TokenTree::Ident(Ident::new(if c { large } else { classic }, i.span()))
                }
                None if i == pname => {
                    TokenTree::Ident(Ident::new(&format!("{pname}{suffix}"), i.span()))
                }
                None => TokenTree::Ident(i),
            },
            TokenTree::Literal(l) if l.to_string() == literal => {
                let mut renamed = Literal::string(&format!("{name}{suffix}"));
                renamed.set_span(l.span());
                TokenTree::Literal(renamed)
            }
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), rewrite(g.stream(), c, pname));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            other => other,
        })
        .collect()
}

fn expand(f: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let pname = f.sig.ident.clone();
    let Some(name) = pname.to_string().strip_prefix('P').map(str::to_string) else {
        return Err(syn::Error::new_spanned(
            &f.sig.ident,
            "#[mpi] goes on PMPI_x (it adds MPI_x)",
        ));
    };
    let name = format_ident!("{}", name);
    let inputs = &f.sig.inputs;
    let mut args = Vec::new();
    for a in inputs {
        let FnArg::Typed(t) = a else {
            return Err(syn::Error::new_spanned(a, "an MPI function takes no self"));
        };
        let Pat::Ident(i) = &*t.pat else {
            return Err(syn::Error::new_spanned(&t.pat, "arguments are plain names"));
        };
        args.push(i.ident.clone());
    }
    let attrs = &f.attrs;
    let output = &f.sig.output;
    let body = &f.block;
    let pdoc = format!("`{pname}`.");
    let doc = format!("`{name}`: calls `{pname}`.");
    Ok(quote! {
        #(#attrs)*
        #[doc = #pdoc]
        ///
        /// # Safety
        /// As MPI's: the pointers a C caller passes are valid.
        #[no_mangle]
        pub unsafe extern "C" fn #pname(#inputs) #output #body

        #[doc = #doc]
        ///
        /// # Safety
        /// As MPI's: the pointers a C caller passes are valid.
        #[no_mangle]
        pub unsafe extern "C" fn #name(#inputs) #output {
            #pname(#(#args),*)
        }
    })
}
