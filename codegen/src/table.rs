//! The action table (name, response, `since`, transport and effect of every action), the
//! `Action`/`Response` impls, name lookups, and the SDK's typed calls.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::model::{Effect, Kind, Model};

/// Items appended to the generated protocol module.
pub fn protocol_items(model: &Model) -> TokenStream {
    let protocol = model.protocol;
    let min_client = model.min_client_protocol;
    let mut impls = Vec::new();
    let mut infos = Vec::new();
    let mut action_names = Vec::new();
    let mut visits = Vec::new();
    for def in model.of_kind(Kind::Action) {
        let ty = format_ident!("{}", def.name);
        let name = &def.name;
        let since = def.since();
        let http = def.http();
        let response = def.response().unwrap_or_default();
        // `Model::load` refused any action without a valid `x-effect`; a write is the safe side.
        let effect = match def.effect() {
            Some(Effect::Read) => quote!(crate::action::Effect::Read),
            Some(Effect::Write) | None => quote!(crate::action::Effect::Write),
        };
        action_names.push(quote!(Self::#ty(_) => #name));
        visits.push(quote!(#name => visitor.visit::<#ty>()));
        infos.push(quote!(crate::action::ActionInfo {
            name: #name, response: #response, since: #since, http: #http, effect: #effect
        }));
        if response.is_empty() {
            continue;
        }
        let response_ty = format_ident!("{}", response);
        let key = def
            .properties()
            .into_iter()
            .map(|(name, _)| name)
            .find(|name| matches!(*name, "clientRequestId" | "clientMessageId"));
        let key = match key {
            Some(key) => quote!(::std::option::Option::Some(#key)),
            None => quote!(::std::option::Option::None),
        };
        impls.push(quote! {
            impl crate::Action for #ty {
                const NAME: &'static str = #name;
                const SINCE: u32 = #since;
                const HTTP: bool = #http;
                const EFFECT: crate::action::Effect = #effect;
                const IDEMPOTENCY_KEY: ::std::option::Option<&'static str> = #key;
                type Response = #response_ty;
                fn into_action(self) -> AgentAction {
                    AgentAction::#ty(self)
                }
            }
        });
    }
    let mut response_names = Vec::new();
    for def in model.of_kind(Kind::Response) {
        let ty = format_ident!("{}", def.name);
        let name = &def.name;
        response_names.push(quote!(Self::#ty(_) => #name));
        impls.push(quote! {
            impl crate::Response for #ty {
                const NAME: &'static str = #name;
                fn from_response(response: AgentResponse) -> ::std::option::Option<Self> {
                    match response {
                        AgentResponse::#ty(inner) => ::std::option::Option::Some(inner),
                        _ => ::std::option::Option::None,
                    }
                }
                fn into_response(self) -> AgentResponse {
                    AgentResponse::#ty(self)
                }
            }
        });
    }
    quote! {
        /// `AGENTS_PROTOCOL_VERSION` as the schema states it (`x-protocol`).
        pub const SCHEMA_PROTOCOL_VERSION: u32 = #protocol;
        /// `MIN_CLIENT_PROTOCOL` as the schema states it (`x-min-client-protocol`).
        pub const SCHEMA_MIN_CLIENT_PROTOCOL: u32 = #min_client;

        /// Every action of the protocol, sorted by name.
        pub const ACTIONS: &[crate::action::ActionInfo] = &[#(#infos),*];

        impl AgentAction {
            /// The wire name (`_`) of the action.
            pub fn name(&self) -> &'static str {
                match self { #(#action_names),* }
            }

            /// Runs `visitor` with the generated type of the action named `name`; `None` for a
            /// name the protocol does not know.
            pub fn visit<V: crate::action::ActionVisitor>(name: &str, visitor: V) -> ::std::option::Option<V::Output> {
                ::std::option::Option::Some(match name {
                    #(#visits,)*
                    _ => return ::std::option::Option::None,
                })
            }
        }

        impl AgentResponse {
            /// The wire name (`_`) of the response.
            pub fn name(&self) -> &'static str {
                match self { #(#response_names),* }
            }
        }

        #(#impls)*
    }
}

/// The SDK's typed calls: one method per HTTP action.
pub fn sdk_items(model: &Model) -> TokenStream {
    let mut methods = Vec::new();
    for def in model.of_kind(Kind::Action) {
        let Some(response) = def.response().filter(|r| !r.is_empty()) else { continue };
        if !def.http() {
            continue;
        }
        let method = format_ident!("{}", snake_case(&def.name));
        let ty = format_ident!("{}", def.name);
        let response_ty = format_ident!("{}", response);
        let summary = format!(" Sends `{}` and returns its `{}`.", def.name, response);
        let detail = def
            .description()
            .map(|text| text.lines().map(|line| format!(" {line}")).collect::<Vec<_>>())
            .unwrap_or_default();
        let blank = detail.first().map(|_| quote!(#[doc = ""]));
        methods.push(quote! {
            #[doc = #summary]
            #blank
            #(#[doc = #detail])*
            pub async fn #method(&self, action: proto::#ty) -> ::std::result::Result<proto::#response_ty, Error> {
                self.call(action).await
            }
        });
    }
    quote! {
        use seed_agents_protocol::generated as proto;

        use crate::{Client, Error};

        impl Client {
            #(#methods)*
        }
    }
}

/// `CreateAgent` → `create_agent`.
pub fn snake_case(name: &str) -> String {
    // "OAuth" is one word.
    let name = name.replace("OAuth", "Oauth");
    let mut out = String::with_capacity(name.len() + 4);
    let chars: Vec<char> = name.chars().collect();
    for (index, c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = index > 0 && !chars[index - 1].is_ascii_uppercase();
            let next_lower = chars.get(index + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = index > 0 && chars[index - 1].is_ascii_uppercase();
            if index > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(*c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::snake_case;

    #[test]
    fn snake_case_handles_acronyms() {
        assert_eq!(snake_case("CreateAgent"), "create_agent");
        assert_eq!(snake_case("StartProviderOAuth"), "start_provider_oauth");
        assert_eq!(snake_case("UploadAgentMemoryFileToIpfs"), "upload_agent_memory_file_to_ipfs");
        assert_eq!(snake_case("ListMcpServers"), "list_mcp_servers");
    }
}
