//! `#[mpi]`: export one of fm-mpi's functions under MPI's two names.
//!
//! Written on `fn PMPI_x(args) -> c_int { body }` (plain Rust that rustfmt
//! formats), it makes that function `#[no_mangle] pub unsafe extern "C"`,
//! and adds `MPI_x`, which calls `PMPI_x`: MPI's profiling interface, where
//! a tool that defines `MPI_x` itself reaches the library through `PMPI_x`.

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_macro_input, FnArg, ItemFn, Pat};

/// Export `PMPI_x` and `MPI_x` (module docs).
#[proc_macro_attribute]
pub fn mpi(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(proc_macro2::Span::call_site(), "#[mpi] takes no arguments")
            .to_compile_error()
            .into();
    }
    let f = parse_macro_input!(item as ItemFn);
    match expand(f) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
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
