//! Rust types: typify generates them from the schema, then a syn pass fixes what typify gets wrong.
//!
//! What typify 0.8 does that the wire cannot accept, and what we do instead:
//! - a `oneOf` of `$ref`s becomes `#[serde(untagged)]`: we tag it by the union's `x-discriminator`
//!   (or keep it untagged with a trailing `Other(Value)` member when the union is `x-open`), and
//!   drop the tag field from member structs so serde's tag is the only one;
//! - an optional array or map becomes a plain `Vec`/`BTreeMap` skipped when empty: we make it an
//!   `Option`, because an empty list and an absent one mean different things (and are signed
//!   differently);
//! - an optional nullable property collapses to `Option`: we make it `Nullable` (absent / null /
//!   value);
//! - `const` becomes `serde_json::Value`: we feed it as a one-value `enum` instead, and fail if any
//!   `serde_json` type is left in the output.
//!
//! typify never sees our `x-id`: it types a string property as `String`, and the fix-up pass puts
//! the property's id type (`AgentId`, see [`crate::ids`]) in its place, in the field, the
//! constructor and the setter. The id types themselves are appended to the file.
//!
//! The pass reads typify's output as syntax, never as printed text: attribute arguments are parsed
//! (`#[serde(..)]` as `syn::Meta`s, `#[derive(..)]` as paths) and types are compared by their path
//! segments, so a change in how typify or quote prints tokens cannot silently turn a fix off.

use std::collections::BTreeMap;

use quote::{format_ident, quote};
use serde_json::{Map, Value as Json, json};
use syn::ext::IdentExt;
use syn::punctuated::Punctuated;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;
use typify::{CrateVers, TypeSpace, TypeSpaceSettings};

use crate::Error;
use crate::model::{self, Kind, Model};

/// Keys typify must not see: our own keywords and validation keywords (validation is the server's,
/// with the upstream messages; typify would turn them into constrained newtypes).
const STRIPPED: &[&str] = &[
    "x-kind",
    "x-response",
    "x-since",
    "x-transport",
    "x-effect",
    "x-discriminator",
    "x-open",
    "x-id",
    "x-protocol",
    "x-min-client-protocol",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "uniqueItems",
    "format",
    "examples",
    "$comment",
];

/// The generated protocol types, and the schema file each definition comes from.
#[derive(Debug)]
pub struct Types {
    /// Every type with its impls (typify's and the fix-up pass's), as one flat file.
    pub file: syn::File,
    /// The schema file (`agents.json`) of every definition, inline objects hoisted out of one
    /// included (`RunInfoError` comes from the file defining `RunInfo`), keyed by [`key`].
    pub sources: BTreeMap<String, String>,
}

/// Generates the protocol types.
pub fn generate(model: &Model) -> Result<Types, Error> {
    // Inline objects become named definitions first, so the fix-up pass knows every struct by a
    // name we chose (typify would otherwise name them itself, out of our sight).
    let mut all = BTreeMap::new();
    let mut sources = BTreeMap::new();
    for def in model.defs.values() {
        let mut schema = def.schema.clone();
        hoist(&def.name, &mut schema, &mut all)?;
        all.insert(def.name.clone(), schema);
        for name in all.keys() {
            sources.entry(key(name)).or_insert_with(|| def.file.clone());
        }
    }
    let fixer = Fixer::new(model, &all);
    let mut defs = Map::new();
    for (name, schema) in &all {
        let mut schema = schema.clone();
        // A closed union carries its members' tag itself; typify must not see it twice (it would
        // also name the tag's one-value enum after the struct).
        if let Some(tag) = fixer.structs.get(&key(name)).and_then(|facts| facts.drop_tag.as_deref()) {
            drop_property(&mut schema, tag);
        }
        defs.insert(name.clone(), prepare(&schema));
    }
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": defs,
    });
    let root: schemars::schema::RootSchema =
        serde_json::from_value(root).map_err(|e| Error::Schema(format!("schema not readable by typify: {e}")))?;
    let mut settings = TypeSpaceSettings::default();
    settings
        .with_struct_builder(false)
        .with_crate("seed-agents-protocol", CrateVers::Any, None)
        .with_map_type("::std::collections::BTreeMap")
        .with_derive("PartialEq".to_owned());
    let mut space = TypeSpace::new(&settings);
    space.add_root_schema(root).map_err(|e| Error::Typify(e.to_string()))?;
    let mut file: syn::File =
        syn::parse2(space.to_stream()).map_err(|e| Error::Typify(format!("typify output does not parse: {e}")))?;
    let mut fixer = fixer;
    fixer.visit_file_mut(&mut file);
    if !fixer.problems.is_empty() {
        return Err(Error::Typify(fixer.problems.join("\n")));
    }
    file.items.extend(crate::ids::items(model));
    if names_crate("serde_json", |finder| finder.visit_file(&file)) {
        let culprits: Vec<String> = file
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Struct(s) if names_crate("serde_json", |finder| finder.visit_item_struct(s)) => {
                    Some(s.ident.to_string())
                }
                syn::Item::Enum(e) if names_crate("serde_json", |finder| finder.visit_item_enum(e)) => {
                    Some(e.ident.to_string())
                }
                _ => None,
            })
            .collect();
        return Err(Error::Typify(format!(
            "generated code still uses serde_json (an untyped schema): give these a type or x-rust-type: {}",
            culprits.join(", ")
        )));
    }
    Ok(Types { file, sources })
}

/// Replaces every inline object schema below `schema` (in properties, array items and nullable
/// alternatives) by a reference to a new definition named after its place: `RunInfo.error` becomes
/// `RunInfoError`, `RunPlan.steps[]` would become `RunPlanStepsItem`.
fn hoist(parent: &str, schema: &mut Json, out: &mut BTreeMap<String, Json>) -> Result<(), Error> {
    let Some(props) = schema.get_mut("properties").and_then(Json::as_object_mut) else { return Ok(()) };
    for (prop_name, prop) in props.iter_mut() {
        let mut pascal = prop_name.clone();
        if let Some(first) = pascal.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        let base = format!("{parent}{pascal}");
        hoist_at(&base, prop, out)?;
    }
    Ok(())
}

fn hoist_at(name: &str, schema: &mut Json, out: &mut BTreeMap<String, Json>) -> Result<(), Error> {
    if schema.get("properties").is_some() {
        if out.contains_key(name) {
            return Err(Error::Schema(format!("inline object {name} collides with a definition of that name")));
        }
        let mut inner = std::mem::replace(schema, json!({ "$ref": format!("#/$defs/{name}") }));
        hoist(name, &mut inner, out)?;
        out.insert(name.to_owned(), inner);
        return Ok(());
    }
    if let Some(items) = schema.get_mut("items") {
        return hoist_at(&format!("{name}Item"), items, out);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = schema.get_mut(key).and_then(Json::as_array_mut) {
            for alt in alts.iter_mut() {
                hoist_at(name, alt, out)?;
            }
        }
    }
    Ok(())
}

/// How a definition name and typify's Rust name for it are matched: typify re-cases names
/// (`AgentWSEvent` becomes `AgentWsEvent`), so both sides are compared lowercased.
pub fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// Removes a property from an object schema and from its `required` list.
fn drop_property(schema: &mut Json, name: &str) {
    let mut now_empty = false;
    if let Some(props) = schema.get_mut("properties").and_then(Json::as_object_mut) {
        props.remove(name);
        now_empty = props.is_empty();
    }
    if now_empty {
        // Otherwise typify reads "no properties" as an open map; the fix-up pass removes the
        // resulting `deny_unknown_fields`, so unknown keys are still ignored on read.
        if let Some(map) = schema.as_object_mut() {
            map.insert("additionalProperties".into(), Json::Bool(false));
        }
    }
    if let Some(required) = schema.get_mut("required").and_then(Json::as_array_mut) {
        required.retain(|item| item.as_str() != Some(name));
    }
}

/// The schema as typify should see it.
fn prepare(schema: &Json) -> Json {
    match schema {
        Json::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                if STRIPPED.contains(&key.as_str()) {
                    continue;
                }
                match key.as_str() {
                    "const" => match value {
                        Json::String(_) => {
                            out.insert("type".into(), json!("string"));
                            out.insert("enum".into(), json!([value]));
                        }
                        Json::Bool(_) => {
                            out.insert("type".into(), json!("boolean"));
                        }
                        other => {
                            out.insert("const".into(), other.clone());
                        }
                    },
                    "properties" => {
                        let required = model::required(schema);
                        let mut props = Map::new();
                        for (name, prop) in value.as_object().into_iter().flatten() {
                            // Optional nullable properties become `Nullable` in the fix-up pass;
                            // typify only sees the non-null schema.
                            let prop = match model::nullable_inner(prop) {
                                Some(inner) if !required.contains(name.as_str()) => inner,
                                _ => prop,
                            };
                            props.insert(name.clone(), prepare(prop));
                        }
                        out.insert(key.clone(), Json::Object(props));
                    }
                    _ => {
                        out.insert(key.clone(), prepare(value));
                    }
                }
            }
            Json::Object(out)
        }
        Json::Array(items) => Json::Array(items.iter().map(prepare).collect()),
        other => other.clone(),
    }
}

/// Facts about one struct definition the fix-up pass needs.
struct StructFacts {
    /// Wire names of required properties.
    required: Vec<String>,
    /// Wire names of optional nullable properties.
    tristate: Vec<String>,
    /// A tag property that a closed union carries instead of the struct (removed from the schema
    /// before typify sees it).
    drop_tag: Option<String>,
    /// The definition's kind: actions refuse nothing new but keep no unknown fields (the server
    /// reads them); responses and types keep unknown fields for the round trip.
    kind: Kind,
    /// The schema's name for the definition (typify may re-case it).
    name: String,
    /// Wire name → (`x-since`, whether the schema describes it).
    props: BTreeMap<String, (u32, bool)>,
    /// Wire name → the id type its `x-id` names.
    ids: BTreeMap<String, String>,
    /// The definition's `x-since`.
    since: u32,
    /// For an action: its response name, effect and whether it travels over HTTP.
    action: Option<(String, &'static str, bool)>,
    /// For a response: the actions that answer with it.
    answers: Vec<String>,
}

/// Facts about one union definition.
struct UnionFacts {
    tag: String,
    open: bool,
    /// Member type name → tag value.
    members: BTreeMap<String, String>,
}

struct Fixer {
    structs: BTreeMap<String, StructFacts>,
    unions: BTreeMap<String, UnionFacts>,
    /// Constructors and setters, one `impl` per struct, appended to the file.
    impls: Vec<syn::Item>,
    /// What the pass could not fix (a visitor returns nothing): generation fails with these.
    problems: Vec<String>,
}

impl Fixer {
    fn new(model: &Model, all: &BTreeMap<String, Json>) -> Self {
        let mut structs = BTreeMap::new();
        let mut unions = BTreeMap::new();
        for (name, schema) in all {
            if schema.get("properties").is_some() {
                let required: Vec<String> = model::required(schema).into_iter().map(str::to_owned).collect();
                let tristate = model::properties(schema)
                    .into_iter()
                    .filter(|(name, prop)| !required.iter().any(|r| r == name) && model::nullable_inner(prop).is_some())
                    .map(|(name, _)| name.to_owned())
                    .collect();
                let def = model.defs.get(name);
                let kind = def.map(model::Def::kind).unwrap_or(Kind::Type);
                let props = model::properties(schema)
                    .into_iter()
                    .map(|(prop, value)| {
                        let described =
                            value.get("description").and_then(Json::as_str).is_some_and(|d| !d.trim().is_empty());
                        (prop.to_owned(), (model::since_of(value), described))
                    })
                    .collect();
                let ids = model::properties(schema)
                    .into_iter()
                    .filter_map(|(prop, value)| Some((prop.to_owned(), model::id_of(value)??.to_owned())))
                    .collect();
                let action = def.filter(|def| def.kind() == Kind::Action).map(|def| {
                    let effect = def.effect().map(model::Effect::as_str).unwrap_or("write");
                    (def.response().unwrap_or_default().to_owned(), effect, def.http())
                });
                let answers = model
                    .of_kind(Kind::Action)
                    .filter(|action| action.response() == Some(name.as_str()))
                    .map(|action| action.name.clone())
                    .collect();
                structs.insert(
                    key(name),
                    StructFacts {
                        required,
                        tristate,
                        drop_tag: None,
                        kind,
                        name: name.clone(),
                        props,
                        ids,
                        since: model::since_of(schema),
                        action,
                        answers,
                    },
                );
            }
        }
        for def in model.defs.values() {
            let Some(union) = def.union() else { continue };
            let mut members = BTreeMap::new();
            for member in &union.members {
                let value = model.defs.get(member).and_then(|m| m.tag_value(union.tag)).unwrap_or_default();
                members.insert(key(member), value.to_owned());
                if !union.open
                    && let Some(facts) = structs.get_mut(&key(member))
                {
                    facts.drop_tag = Some(union.tag.to_owned());
                }
            }
            unions.insert(key(&def.name), UnionFacts { tag: union.tag.to_owned(), open: union.open, members });
        }
        Fixer { structs, unions, impls: Vec::new(), problems: Vec::new() }
    }
}

impl VisitMut for Fixer {
    fn visit_file_mut(&mut self, file: &mut syn::File) {
        for item in file.items.iter_mut() {
            self.visit_item_mut(item);
        }
        file.items.append(&mut self.impls);
    }

    fn visit_item_mod_mut(&mut self, _: &mut syn::ItemMod) {
        // typify's support modules (`error`) are left as they are; `layout` documents them.
    }

    fn visit_item_struct_mut(&mut self, item: &mut syn::ItemStruct) {
        let Some(facts) = self.structs.get(&key(&item.ident.to_string())) else { return };
        strip_serde_attr(&mut item.attrs, "deny_unknown_fields");
        document_struct(item, facts);
        let syn::Fields::Named(fields) = &mut item.fields else { return };
        let old = std::mem::take(&mut fields.named);
        let mut required = Vec::new();
        let mut setters = Vec::new();
        let mut has_flatten = false;
        for mut field in old {
            // `r#type` is the field `type` on the wire.
            let ident = field.ident.as_ref().map(|i| i.unraw().to_string()).unwrap_or_default();
            let wire = serde_rename(&field.attrs).unwrap_or_else(|| ident.clone());
            if is_flatten(&field.attrs) {
                // The `additionalProperties` map typify flattens in: keep it as typify wrote it.
                has_flatten = true;
                if !has_doc(&field.attrs) {
                    field.attrs.insert(0, syn::parse_quote!(#[doc = " Entries beyond the named fields."]));
                }
                fields.named.push(field);
                continue;
            }
            document_field(&mut field, &wire, facts);
            if let Some(id) = facts.ids.get(&wire) {
                let mut retype = IdRetype { id: format_ident!("{id}"), replaced: 0 };
                retype.visit_type_mut(&mut field.ty);
                if retype.replaced != 1 {
                    self.problems.push(format!(
                        "{}.{wire}: x-id {id} needs typify's type to hold one `String`, found {} in it",
                        facts.name, retype.replaced
                    ));
                }
            }
            field.attrs.retain(|attr| !attr.path().is_ident("serde"));
            if wire != ident {
                field.attrs.push(syn::parse_quote!(#[serde(rename = #wire)]));
            }
            let name = field.ident.clone();
            if !facts.required.contains(&wire) {
                let inner = option_inner(&field.ty).cloned().unwrap_or_else(|| field.ty.clone());
                let setter_doc = format!(" Sets `{wire}` (optional).");
                if facts.tristate.contains(&wire) {
                    field.ty = syn::parse_quote!(::seed_agents_protocol::Nullable<#inner>);
                    field.attrs.push(syn::parse_quote!(
                        #[serde(default, skip_serializing_if = "::seed_agents_protocol::Nullable::is_absent")]
                    ));
                    setters.push(quote! {
                        #[doc = #setter_doc]
                        #[must_use]
                        pub fn #name(mut self, value: impl ::std::convert::Into<#inner>) -> Self {
                            self.#name = ::seed_agents_protocol::Nullable::Value(value.into());
                            self
                        }
                    });
                } else {
                    if is_open_value(&inner) {
                        // For `unknown`, null is data: keep it as `Some(Value::NULL)`.
                        field.attrs.push(syn::parse_quote!(
                            #[serde(
                                default,
                                deserialize_with = "::seed_agents_protocol::value::deserialize_some",
                                skip_serializing_if = "::std::option::Option::is_none"
                            )]
                        ));
                    } else {
                        field.attrs.push(syn::parse_quote!(
                            #[serde(default, skip_serializing_if = "::std::option::Option::is_none")]
                        ));
                    }
                    field.ty = syn::parse_quote!(::std::option::Option<#inner>);
                    setters.push(quote! {
                        #[doc = #setter_doc]
                        #[must_use]
                        pub fn #name(mut self, value: impl ::std::convert::Into<#inner>) -> Self {
                            self.#name = ::std::option::Option::Some(value.into());
                            self
                        }
                    });
                }
            } else {
                required.push((name, field.ty.clone(), wire));
            }
            fields.named.push(field);
        }
        let keeps_unknown = facts.kind != Kind::Action && !has_flatten;
        if keeps_unknown {
            fields.named.push(syn::parse_quote! {
                /// Fields this build does not know, kept as received and sent back unchanged (so
                /// get → modify → update loses nothing a newer server added).
                #[serde(flatten)]
                pub extra: ::std::collections::BTreeMap<::std::string::String, ::seed_agents_protocol::Value>
            });
        }
        // Growth: outside this workspace's server (the `exhaustive` feature), a struct literal
        // would break when the schema gains an optional field; `new` and the setters do not.
        item.attrs.push(syn::parse_quote!(#[cfg_attr(not(feature = "exhaustive"), non_exhaustive)]));
        if required.is_empty() && !derives(&item.attrs, "Default") {
            add_derive(&mut item.attrs, "Default");
        }
        let ty = &item.ident;
        let params = required.iter().map(|(name, ty, _)| quote!(#name: impl ::std::convert::Into<#ty>));
        let inits = required.iter().map(|(name, _, _)| quote!(#name: #name.into()));
        let rest = if required.is_empty() && fields.named.is_empty() {
            quote!()
        } else {
            quote!(..::std::default::Default::default())
        };
        let listed: Vec<String> = required.iter().map(|(_, _, wire)| format!("`{wire}`")).collect();
        let new_doc = if listed.is_empty() {
            " A value with every (optional) field unset.".to_owned()
        } else {
            format!(" A value with the required {}; optional fields unset.", listed.join(", "))
        };
        let body = if required.is_empty() {
            quote!(<Self as ::std::default::Default>::default())
        } else {
            let optional: Vec<_> = fields
                .named
                .iter()
                .filter_map(|field| field.ident.clone())
                .filter(|name| !required.iter().any(|(req, _, _)| req.as_ref() == Some(name)))
                .collect();
            let _ = rest;
            quote!(Self { #(#inits,)* #(#optional: ::std::default::Default::default(),)* })
        };
        self.impls.push(syn::parse_quote! {
            impl #ty {
                #[doc = #new_doc]
                #[allow(clippy::new_without_default)]
                pub fn new(#(#params),*) -> Self {
                    #body
                }
                #(#setters)*
            }
        });
    }

    fn visit_item_enum_mut(&mut self, item: &mut syn::ItemEnum) {
        document_enum(item);
        let Some(facts) = self.unions.get(&key(&item.ident.to_string())) else { return };
        strip_serde_attr(&mut item.attrs, "untagged");
        for variant in item.variants.iter_mut() {
            let member = key(&variant_type_name(variant).unwrap_or_default());
            variant.attrs.retain(|attr| !attr.path().is_ident("serde"));
            if !facts.open
                && let Some(value) = facts.members.get(&member)
            {
                variant.attrs.push(syn::parse_quote!(#[serde(rename = #value)]));
            }
        }
        let tag = &facts.tag;
        if facts.open {
            item.attrs.push(syn::parse_quote!(#[serde(untagged)]));
            let doc = format!("A member this build does not know (its `{tag}` is none of the above), kept as is.");
            let other = format_ident!("Other");
            item.variants.push(syn::parse_quote!(#[doc = #doc] #other(::seed_agents_protocol::Value)));
        } else {
            item.attrs.push(syn::parse_quote!(#[serde(tag = #tag)]));
        }
    }
}

/// Replaces `::std::string::String` in a field's type (`String`, `Option<String>`) by an id type.
struct IdRetype {
    id: syn::Ident,
    replaced: usize,
}

impl VisitMut for IdRetype {
    fn visit_type_mut(&mut self, ty: &mut syn::Type) {
        if is_string(ty) {
            let id = &self.id;
            *ty = syn::parse_quote!(#id);
            self.replaced += 1;
            return;
        }
        syn::visit_mut::visit_type_mut(self, ty);
    }
}

/// Whether a type is `::std::string::String` (or `String`).
fn is_string(ty: &syn::Type) -> bool {
    let syn::Type::Path(syn::TypePath { qself: None, path }) = ty else { return false };
    let names: Vec<String> = path.segments.iter().map(|segment| segment.ident.to_string()).collect();
    path.segments.iter().all(|segment| segment.arguments.is_none())
        && (names == ["std", "string", "String"] || names == ["String"])
}

/// Whether attributes hold a `#[doc]` that says more than typify's placeholder (the item's own
/// name in backticks).
fn has_doc(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| attr.path().is_ident("doc"))
}

/// The text of `#[doc]` attributes, joined by newlines.
fn doc_text(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("doc")) {
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &nv.value
        {
            lines.push(text.value());
        }
    }
    lines.join("\n")
}

/// Replaces an item's docs with `lines` (each a rustdoc line without the leading space).
fn set_doc(attrs: &mut Vec<syn::Attribute>, lines: &[String]) {
    attrs.retain(|attr| !attr.path().is_ident("doc"));
    for (index, line) in lines.iter().enumerate() {
        let line = if line.is_empty() { String::new() } else { format!(" {line}") };
        attrs.insert(index, syn::parse_quote!(#[doc = #line]));
    }
}

/// The schema's description of an item as typify wrote it, or `None` for typify's placeholder.
fn described(attrs: &[syn::Attribute], ident: &str) -> Option<String> {
    let text = doc_text(attrs);
    let text = text.trim();
    if text.is_empty() || text == format!("`{ident}`") { None } else { Some(text.to_owned()) }
}

/// Struct docs: the schema's description (or a sentence from its structure), then what the
/// rustdoc reader needs from the schema's keywords: the response, effect, transport, `x-since`.
fn document_struct(item: &mut syn::ItemStruct, facts: &StructFacts) {
    let name = &facts.name;
    let description = described(&item.attrs, &item.ident.to_string());
    let mut lines: Vec<String> = match description {
        Some(text) => text.lines().map(str::to_owned).collect(),
        None => vec![match (&facts.kind, &facts.action) {
            (Kind::Action, _) => format!("The `{name}` action (`_: \"{name}\"`)."),
            (Kind::Response, _) if !facts.answers.is_empty() => {
                let actions: Vec<String> = facts.answers.iter().map(|a| format!("[`{a}`]")).collect();
                format!("The server's answer to {}.", actions.join(", "))
            }
            (Kind::Response, _) => format!("The `{name}` response."),
            _ if facts.props.is_empty() => format!("The `{name}` object (no fields)."),
            _ => {
                let fields: Vec<String> = facts.props.keys().map(|p| format!("`{p}`")).collect();
                format!("The `{name}` object: {}.", fields.join(", "))
            }
        }],
    };
    lines.push(String::new());
    if let Some((response, effect, http)) = &facts.action {
        if !response.is_empty() {
            lines.push(format!("- Response: [`{response}`]"));
        }
        let effect = if *effect == "read" { "read (changes no state; safe to repeat)" } else { "write" };
        lines.push(format!("- Effect: {effect}"));
        if !http {
            lines.push("- Transport: WebSocket only".to_owned());
        }
    }
    lines.push(format!("- Since protocol {}", facts.since));
    if facts.kind == Kind::Action || !facts.required.is_empty() {
        let required: Vec<String> = facts
            .required
            .iter()
            .filter(|r| r.as_str() != "_" && facts.drop_tag.as_deref() != Some(r.as_str()))
            .map(|r| format!("`{r}`"))
            .collect();
        if !required.is_empty() {
            lines.push(format!("- Required: {} (see [`{}::new`])", required.join(", "), item.ident));
        }
    }
    set_doc(&mut item.attrs, &lines);
}

/// Field docs: the schema's description, or which wire field it is; then `x-since` when later
/// than the definition's.
fn document_field(field: &mut syn::Field, wire: &str, facts: &StructFacts) {
    let (since, schema_described) = facts.props.get(wire).copied().unwrap_or((1, false));
    let existing = doc_text(&field.attrs);
    let mut lines: Vec<String> = if schema_described && !existing.trim().is_empty() {
        existing.trim().lines().map(str::to_owned).collect()
    } else {
        let presence = if facts.required.iter().any(|r| r == wire) { "required" } else { "optional" };
        vec![format!("`{wire}` ({presence}).")]
    };
    if since > facts.since {
        lines.push(String::new());
        lines.push(format!("Since protocol {since}."));
    }
    set_doc(&mut field.attrs, &lines);
}

/// Enum docs: a sentence for typify's placeholder, and each variant its wire value or member.
fn document_enum(item: &mut syn::ItemEnum) {
    let ident = item.ident.to_string();
    if described(&item.attrs, &ident).is_none() {
        set_doc(&mut item.attrs, &[format!("One of the `{ident}` values.")]);
    }
    for variant in item.variants.iter_mut() {
        if has_doc(&variant.attrs) {
            continue;
        }
        let doc = match (serde_rename(&variant.attrs), variant_type_name(variant)) {
            (Some(wire), _) if matches!(variant.fields, syn::Fields::Unit) => format!(" The wire value `{wire}`."),
            (_, Some(member)) if local_type(variant) => format!(" A [`{member}`]."),
            (_, Some(member)) => format!(" A `{member}`."),
            _ => format!(" `{}`.", variant.ident),
        };
        variant.attrs.insert(0, syn::parse_quote!(#[doc = #doc]));
    }
}

/// Whether a `#[derive]` lists `name` (by the last segment of its path: `Default` or
/// `::std::default::Default`).
fn derives(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("derive"))
        .flat_map(|attr| attr_list::<syn::Path>(attr).unwrap_or_default())
        .any(|path| path.segments.last().is_some_and(|segment| segment.ident == name))
}

/// Adds `name` to the first `#[derive]`.
fn add_derive(attrs: &mut [syn::Attribute], name: &str) {
    let Some(attr) = attrs.iter_mut().find(|attr| attr.path().is_ident("derive")) else { return };
    let Some(mut paths) = attr_list::<syn::Path>(attr) else { return };
    paths.push(format_ident!("{name}").into());
    *attr = syn::parse_quote!(#[derive(#paths)]);
}

/// Removes one word (`untagged`, `deny_unknown_fields`) from `#[serde(...)]` attributes, dropping
/// attributes left empty.
fn strip_serde_attr(attrs: &mut Vec<syn::Attribute>, word: &str) {
    attrs.retain_mut(|attr| {
        if !attr.path().is_ident("serde") {
            return true;
        }
        let Some(metas) = attr_list::<syn::Meta>(attr) else { return true };
        if !metas.iter().any(|meta| meta.path().is_ident(word)) {
            return true;
        }
        let rest: Punctuated<syn::Meta, syn::Token![,]> =
            metas.into_iter().filter(|meta| !meta.path().is_ident(word)).collect();
        if rest.is_empty() {
            return false;
        }
        *attr = syn::parse_quote!(#[serde(#rest)]);
        true
    });
}

/// Whether a field is `#[serde(flatten)]`.
fn is_flatten(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("serde"))
        .flat_map(|attr| attr_list::<syn::Meta>(attr).unwrap_or_default())
        .any(|meta| meta.path().is_ident("flatten"))
}

/// The comma-separated arguments of a list attribute (`#[derive(A, B)]`, `#[serde(a, b = "c")]`),
/// parsed as `T`; `None` when the attribute is not a list of `T`.
fn attr_list<T: syn::parse::Parse>(attr: &syn::Attribute) -> Option<Punctuated<T, syn::Token![,]>> {
    attr.parse_args_with(Punctuated::<T, syn::Token![,]>::parse_terminated).ok()
}

/// Whether any path `visit` walks has a segment named `name` (`serde_json::Value`,
/// `::serde_json::Map<..>`, `serde_json::json!`); attribute strings and docs do not count.
fn names_crate(name: &str, visit: impl FnOnce(&mut PathFinder<'_>)) -> bool {
    let mut finder = PathFinder { name, found: false };
    visit(&mut finder);
    finder.found
}

/// The visitor of [`names_crate`].
struct PathFinder<'a> {
    name: &'a str,
    found: bool,
}

impl<'ast> Visit<'ast> for PathFinder<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.found |= path.segments.iter().any(|segment| segment.ident == self.name);
        syn::visit::visit_path(self, path);
    }
}

/// The `rename = "..."` of a field's serde attributes.
fn serde_rename(attrs: &[syn::Attribute]) -> Option<String> {
    let mut found = None;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("serde")) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                let value: syn::LitStr = meta.value()?.parse()?;
                found = Some(value.value());
            } else if meta.input.peek(syn::Token![=]) {
                let _: syn::Expr = meta.value()?.parse()?;
            }
            Ok(())
        });
    }
    found
}

/// Whether a type is our open value type, `::seed_agents_protocol::Value`.
fn is_open_value(ty: &syn::Type) -> bool {
    let syn::Type::Path(syn::TypePath { qself: None, path }) = ty else { return false };
    let names = ["seed_agents_protocol", "Value"];
    path.segments.len() == names.len()
        && path.segments.iter().zip(names).all(|(segment, name)| segment.ident == name && segment.arguments.is_none())
}

/// `T` of `::std::option::Option<T>`.
fn option_inner(ty: &syn::Type) -> Option<&syn::Type> {
    let syn::Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else { return None };
    match args.args.first()? {
        syn::GenericArgument::Type(inner) => Some(inner),
        _ => None,
    }
}

/// Whether a one-field tuple variant wraps a type of the generated module (a one-segment path),
/// which rustdoc can link.
fn local_type(variant: &syn::Variant) -> bool {
    let syn::Fields::Unnamed(fields) = &variant.fields else { return false };
    let Some(field) = fields.unnamed.first() else { return false };
    matches!(&field.ty, syn::Type::Path(path) if path.path.segments.len() == 1 && path.path.leading_colon.is_none())
}

/// The type name a one-field tuple variant wraps.
fn variant_type_name(variant: &syn::Variant) -> Option<String> {
    let syn::Fields::Unnamed(fields) = &variant.fields else { return None };
    let syn::Type::Path(path) = &fields.unnamed.first()?.ty else { return None };
    Some(path.path.segments.last()?.ident.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(item: syn::ItemStruct) -> Vec<syn::Attribute> {
        item.attrs
    }

    #[test]
    fn serde_words_are_matched_as_paths_not_as_text() {
        // A rename to "flatten" is not `flatten`; a path ending in `Default` is `Default`.
        let renamed = attrs(syn::parse_quote!(
            #[serde(rename = "flatten")]
            struct A;
        ));
        assert!(!is_flatten(&renamed));
        assert!(is_flatten(&attrs(syn::parse_quote!(
            #[serde(default, flatten)]
            struct A;
        ))));
        let derived = attrs(syn::parse_quote!(
            #[derive(Clone, ::std::default::Default)]
            struct A;
        ));
        assert!(derives(&derived, "Default"));
        assert!(!derives(&derived, "Debug"));
        let named_like = attrs(syn::parse_quote!(
            #[derive(DefaultValue)]
            struct A;
        ));
        assert!(!derives(&named_like, "Default"));
    }

    #[test]
    fn stripping_a_serde_word_keeps_the_others() {
        let mut list = attrs(syn::parse_quote!(
            #[derive(Clone)]
            #[serde(untagged, rename = "untagged")]
            #[serde(untagged)]
            struct A;
        ));
        strip_serde_attr(&mut list, "untagged");
        let expected = attrs(syn::parse_quote!(
            #[derive(Clone)]
            #[serde(rename = "untagged")]
            struct A;
        ));
        assert_eq!(list, expected);
        let mut derive = attrs(syn::parse_quote!(
            #[derive(Clone, Debug)]
            struct A;
        ));
        add_derive(&mut derive, "Default");
        assert_eq!(
            derive,
            attrs(syn::parse_quote!(
                #[derive(Clone, Debug, Default)]
                struct A;
            ))
        );
    }

    #[test]
    fn leftover_serde_json_is_found_in_paths_only() {
        let typed: syn::ItemStruct = syn::parse_quote!(
            /// Mentions serde_json in its docs only.
            #[serde(rename = "serde_json")]
            struct A {
                value: ::seed_agents_protocol::Value,
            }
        );
        assert!(!names_crate("serde_json", |finder| finder.visit_item_struct(&typed)));
        let untyped: syn::ItemStruct = syn::parse_quote!(
            struct A {
                value: ::std::vec::Vec<::serde_json::Value>,
            }
        );
        assert!(names_crate("serde_json", |finder| finder.visit_item_struct(&untyped)));
        assert!(is_open_value(&syn::parse_quote!(::seed_agents_protocol::Value)));
        assert!(!is_open_value(&syn::parse_quote!(::seed_agents_protocol::Value<u8>)));
        assert!(!is_open_value(&syn::parse_quote!(::serde_json::Value)));
    }
}
