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

use std::collections::BTreeMap;

use quote::{format_ident, quote};
use serde_json::{Map, Value as Json, json};
use syn::visit_mut::VisitMut;
use typify::{CrateVers, TypeSpace, TypeSpaceSettings};

use crate::Error;
use crate::model::{self, Model};

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

/// Generates the protocol types as a syn file.
pub fn generate(model: &Model) -> Result<syn::File, Error> {
    // Inline objects become named definitions first, so the fix-up pass knows every struct by a
    // name we chose (typify would otherwise name them itself, out of our sight).
    let mut all = BTreeMap::new();
    for def in model.defs.values() {
        let mut schema = def.schema.clone();
        hoist(&def.name, &mut schema, &mut all)?;
        all.insert(def.name.clone(), schema);
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
    let leftovers = quote!(#file).to_string();
    if leftovers.contains("serde_json") {
        let culprits: Vec<String> = file
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Struct(s) if quote!(#s).to_string().contains("serde_json") => Some(s.ident.to_string()),
                syn::Item::Enum(e) if quote!(#e).to_string().contains("serde_json") => Some(e.ident.to_string()),
                _ => None,
            })
            .collect();
        return Err(Error::Typify(format!(
            "generated code still uses serde_json (an untyped schema): give these a type or x-rust-type: {}",
            culprits.join(", ")
        )));
    }
    Ok(file)
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
fn key(name: &str) -> String {
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
#[derive(Default)]
struct StructFacts {
    /// Wire names of required properties.
    required: Vec<String>,
    /// Wire names of optional nullable properties.
    tristate: Vec<String>,
    /// A tag property that a closed union carries instead of the struct (removed from the schema
    /// before typify sees it).
    drop_tag: Option<String>,
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
                structs.insert(key(name), StructFacts { required, tristate, drop_tag: None });
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
        Fixer { structs, unions }
    }
}

impl VisitMut for Fixer {
    fn visit_item_struct_mut(&mut self, item: &mut syn::ItemStruct) {
        let Some(facts) = self.structs.get(&key(&item.ident.to_string())) else { return };
        strip_serde_attr(&mut item.attrs, "deny_unknown_fields");
        let syn::Fields::Named(fields) = &mut item.fields else { return };
        let old = std::mem::take(&mut fields.named);
        for mut field in old {
            let ident = field.ident.as_ref().map(|i| i.to_string()).unwrap_or_default();
            let wire = serde_rename(&field.attrs).unwrap_or_else(|| ident.trim_start_matches("r#").to_owned());
            if is_flatten(&field.attrs) {
                // The `additionalProperties` map typify flattens in: keep it as typify wrote it.
                fields.named.push(field);
                continue;
            }
            field.attrs.retain(|attr| !attr.path().is_ident("serde"));
            if wire != ident.trim_start_matches("r#") {
                field.attrs.push(syn::parse_quote!(#[serde(rename = #wire)]));
            }
            if !facts.required.contains(&wire) {
                let inner = option_inner(&field.ty).cloned().unwrap_or_else(|| field.ty.clone());
                if facts.tristate.contains(&wire) {
                    field.ty = syn::parse_quote!(::seed_agents_protocol::Nullable<#inner>);
                    field.attrs.push(syn::parse_quote!(
                        #[serde(default, skip_serializing_if = "::seed_agents_protocol::Nullable::is_absent")]
                    ));
                } else if is_open_value(&inner) {
                    // For `unknown`, null is data: keep it as `Some(Value::NULL)`.
                    field.ty = syn::parse_quote!(::std::option::Option<#inner>);
                    field.attrs.push(syn::parse_quote!(
                        #[serde(
                            default,
                            deserialize_with = "::seed_agents_protocol::value::deserialize_some",
                            skip_serializing_if = "::std::option::Option::is_none"
                        )]
                    ));
                } else {
                    field.ty = syn::parse_quote!(::std::option::Option<#inner>);
                    field.attrs.push(syn::parse_quote!(
                        #[serde(default, skip_serializing_if = "::std::option::Option::is_none")]
                    ));
                }
            }
            fields.named.push(field);
        }
    }

    fn visit_item_enum_mut(&mut self, item: &mut syn::ItemEnum) {
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

/// Removes one word (`untagged`, `deny_unknown_fields`) from `#[serde(...)]` attributes, dropping
/// attributes left empty.
fn strip_serde_attr(attrs: &mut Vec<syn::Attribute>, word: &str) {
    attrs.retain(|attr| {
        if !attr.path().is_ident("serde") {
            return true;
        }
        let text = quote!(#attr).to_string();
        !text.contains(word) || text.contains(',')
    });
}

/// Whether a field is `#[serde(flatten)]`.
fn is_flatten(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().filter(|attr| attr.path().is_ident("serde")).any(|attr| quote!(#attr).to_string().contains("flatten"))
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

/// Whether a type is our open value type.
fn is_open_value(ty: &syn::Type) -> bool {
    let syn::Type::Path(path) = ty else { return false };
    let names: Vec<String> = path.path.segments.iter().map(|s| s.ident.to_string()).collect();
    names == ["seed_agents_protocol", "Value"]
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

/// The type name a one-field tuple variant wraps.
fn variant_type_name(variant: &syn::Variant) -> Option<String> {
    let syn::Fields::Unnamed(fields) = &variant.fields else { return None };
    let syn::Type::Path(path) = &fields.unnamed.first()?.ty else { return None };
    Some(path.path.segments.last()?.ident.to_string())
}
