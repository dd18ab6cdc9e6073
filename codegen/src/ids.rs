//! Typed ids: one transparent newtype per entry of the schema's `x-ids` table.
//!
//! A property with `"x-id": "AgentId"` is still a string on the wire; in Rust it is an `AgentId`,
//! so an agent id cannot be passed where a session id is expected. The newtype is
//! `#[serde(transparent)]` over a `String`: it encodes to exactly the bytes the string did, and
//! decoding accepts any string (`assistantEventId: ''` included), as before. Checks are the
//! server's; a type whose entry names a `format` also gets a checked `parse` (its `FromStr`).
//!
//! Every type gets the same impls, so ids read like the strings they were: `new`, `as_str`,
//! `into_string`; `Deref<Target = str>` (so `&id` passes where a `&str` is taken), `AsRef<str>`,
//! `Borrow<str>` (so a `HashMap<AgentId, _>` is looked up by `&str`); `Display`; `FromStr`;
//! `From<String>`, `From<&str>`, `From<&String>`, `From<&Self>` and `From<Self> for String`; and
//! equality with `str`, `&str` and `String` both ways. Constructors and setters of the generated
//! types take `impl Into<AgentId>`, so `GetAgent::new("agent-1")` compiles as it did.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::model::{IdFormat, IdType, Model};

/// Every id type with its impls, sorted by name.
pub fn items(model: &Model) -> Vec<syn::Item> {
    model.ids.values().flat_map(|id| id_items(id).items).collect()
}

/// The rustdoc lines of an id type (each without the leading space).
fn doc(id: &IdType) -> Vec<String> {
    let mut lines: Vec<String> = id.description.lines().map(str::to_owned).collect();
    lines.push(String::new());
    lines.push("A string on the wire (the schema's `x-id`): this type changes no encoded byte, and".to_owned());
    lines.push("decoding accepts any string, as the server may send one (an empty id included).".to_owned());
    if let Some(format) = id.format {
        lines.push(format!(
            "[`{}::parse`] checks that it is {}; `new`, `From` and decoding do not.",
            id.name,
            what(format)
        ));
    }
    lines
}

/// What a format requires, for docs.
fn what(format: IdFormat) -> &'static str {
    match format {
        IdFormat::Principal => "a canonical base58btc principal string (`z…`)",
        IdFormat::Sha256Hex => "64 lowercase hex digits (a SHA-256 digest)",
    }
}

fn id_items(id: &IdType) -> syn::File {
    let ty = format_ident!("{}", id.name);
    let docs = doc(id).into_iter().map(|line| if line.is_empty() { line } else { format!(" {line}") });
    let name = &id.name;
    let from_str = from_str(id, &ty);
    let tokens = quote! {
        #(#[doc = #docs])*
        #[derive(::serde::Deserialize, ::serde::Serialize, Clone, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
        #[serde(transparent)]
        pub struct #ty(::std::string::String);
        impl #ty {
            /// Wraps `value` as it is (nothing is checked).
            pub fn new(value: impl ::std::convert::Into<::std::string::String>) -> Self {
                Self(value.into())
            }
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
            /// The id as an owned string.
            pub fn into_string(self) -> ::std::string::String {
                self.0
            }
        }
        impl ::std::ops::Deref for #ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }
        impl ::std::convert::AsRef<str> for #ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
        impl ::std::borrow::Borrow<str> for #ty {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
        impl ::std::fmt::Display for #ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        #from_str
        impl ::std::convert::From<::std::string::String> for #ty {
            fn from(value: ::std::string::String) -> Self {
                Self(value)
            }
        }
        impl ::std::convert::From<&str> for #ty {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }
        impl ::std::convert::From<&::std::string::String> for #ty {
            fn from(value: &::std::string::String) -> Self {
                Self(value.clone())
            }
        }
        impl ::std::convert::From<&#ty> for #ty {
            fn from(value: &#ty) -> Self {
                value.clone()
            }
        }
        impl ::std::convert::From<#ty> for ::std::string::String {
            fn from(value: #ty) -> Self {
                value.0
            }
        }
        impl ::std::cmp::PartialEq<str> for #ty {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }
        impl ::std::cmp::PartialEq<&str> for #ty {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
        impl ::std::cmp::PartialEq<::std::string::String> for #ty {
            fn eq(&self, other: &::std::string::String) -> bool {
                self.0 == *other
            }
        }
        impl ::std::cmp::PartialEq<#ty> for ::std::primitive::str {
            fn eq(&self, other: &#ty) -> bool {
                self == other.0
            }
        }
        impl ::std::cmp::PartialEq<#ty> for &::std::primitive::str {
            fn eq(&self, other: &#ty) -> bool {
                *self == other.0
            }
        }
        impl ::std::cmp::PartialEq<#ty> for ::std::string::String {
            fn eq(&self, other: &#ty) -> bool {
                *self == other.0
            }
        }
    };
    syn::parse2(tokens).unwrap_or_else(|error| panic!("the {name} items do not parse: {error}"))
}

/// `FromStr`: for an id with a format, the checked `parse` (and `parse` itself); for any other,
/// every string is one.
fn from_str(id: &IdType, ty: &syn::Ident) -> TokenStream {
    let Some(format) = id.format else {
        return quote! {
            impl ::std::str::FromStr for #ty {
                type Err = ::std::convert::Infallible;
                fn from_str(value: &str) -> ::std::result::Result<Self, Self::Err> {
                    ::std::result::Result::Ok(Self(value.to_owned()))
                }
            }
        };
    };
    let variant = match format {
        IdFormat::Principal => format_ident!("Principal"),
        IdFormat::Sha256Hex => format_ident!("Sha256Hex"),
    };
    let name = &id.name;
    let parse_doc = format!(" Wraps `value` if it is {}; otherwise says why not.", what(format));
    quote! {
        impl #ty {
            #[doc = #parse_doc]
            pub fn parse(
                value: impl ::std::convert::Into<::std::string::String>,
            ) -> ::std::result::Result<Self, ::seed_agents_protocol::id::IdError> {
                ::seed_agents_protocol::id::IdFormat::#variant.check(#name, value.into()).map(Self)
            }
        }
        impl ::std::str::FromStr for #ty {
            type Err = ::seed_agents_protocol::id::IdError;
            fn from_str(value: &str) -> ::std::result::Result<Self, Self::Err> {
                Self::parse(value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(format: Option<IdFormat>) -> IdType {
        IdType { name: "AccountId".into(), file: "common.json".into(), description: "An account.".into(), format }
    }

    #[test]
    fn every_id_is_a_transparent_string_with_the_same_impls() {
        let file = id_items(&id(None));
        let text = prettyplease::unparse(&file);
        assert!(text.contains("#[serde(transparent)]\npub struct AccountId(::std::string::String);"), "{text}");
        assert!(text.contains("type Err = ::std::convert::Infallible;"), "{text}");
        assert!(!text.contains("fn parse("), "{text}");
        let impls = file.items.iter().filter(|item| matches!(item, syn::Item::Impl(_))).count();
        assert_eq!(impls, 17, "{text}");
    }

    #[test]
    fn a_format_gives_a_checked_parse_and_from_str() {
        let text = prettyplease::unparse(&id_items(&id(Some(IdFormat::Principal))));
        assert!(text.contains("pub fn parse("), "{text}");
        assert!(text.contains("IdFormat::Principal") && text.contains(".check(\"AccountId\", value.into())"), "{text}");
        assert!(text.contains("type Err = ::seed_agents_protocol::id::IdError;"), "{text}");
        assert!(text.contains("[`AccountId::parse`] checks"), "{text}");
    }
}
