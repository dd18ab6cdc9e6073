//! Where each generated protocol item goes: one module per schema file under
//! `schema/src/generated/`, each type followed by its impls, and the imports between them.
//!
//! - A definition's type goes to the module of the schema file that defines it (`agents.json` →
//!   `agents`); an inline object the fix-up pass hoists out goes with the definition it came from.
//! - A type typify names itself (an inline enum or union, such as `ModelProviderConfigAuthMode`)
//!   goes where the types that use it are; when those are in several modules (or none), it goes
//!   to `shared`, whose module doc says so.
//! - An impl goes right after its self type: inherent impls (constructor and setters) first, then
//!   trait impls (typify's `From`, `Display`, `FromStr`; the action table's `Action`/`Response`).
//! - Constants (`ACTIONS` and the version constants) go to `table`.
//! - The typed ids of the `x-ids` table go to `ids`, with their impls; an impl of a trait for a
//!   foreign type (`From<AgentId> for String`, `PartialEq<AgentId> for str`) goes with the
//!   generated type its trait names.
//! - A module typify emits for support (`error`, its `ConversionError`) becomes a public module
//!   of its own, as it was; no schema file defines it.
//!
//! Everything is placed by syntax, never by printed tokens: an impl by its self type's path, a
//! module's imports by the first segment of every path its items use. `generated/mod.rs` declares
//! the modules and re-exports every item, so each keeps its flat path (`generated::CreateAgent`).

use std::collections::{BTreeMap, BTreeSet};

use quote::format_ident;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::Error;
use crate::model::Model;
use crate::types::key;

/// The module of `ACTIONS` and the version constants.
const TABLE: &str = "table";
/// The module of typify's types without one owning schema file.
const SHARED: &str = "shared";
/// The module of the typed ids (`x-ids`).
const IDS: &str = "ids";

/// One generated module: `schema/src/generated/<name>.rs`.
#[derive(Debug)]
pub struct Module {
    /// The module name, also its file stem.
    pub name: String,
    /// What it holds.
    pub kind: ModuleKind,
    /// Its `//!` doc, one line per entry (without the leading `//! `).
    pub doc: Vec<String>,
    /// Its `use` items, then its items.
    pub items: Vec<syn::Item>,
}

/// What a module holds, which decides how `mod.rs` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleKind {
    /// The types of one schema file (`agents.json`); private, its items re-exported.
    Schema(String),
    /// `ACTIONS` and the version constants; private, its items re-exported.
    Table,
    /// typify's types that no single schema file owns; private, its items re-exported.
    Shared,
    /// The typed ids of the `x-ids` table; crate-visible (the crate root re-exports them too),
    /// its items re-exported.
    Ids,
    /// A support module typify emits (`error`); public under its own name, as typify made it.
    Support,
}

impl Module {
    /// The schema file the module is generated from, or `*.json` when it draws on all of them.
    pub fn source(&self) -> &str {
        match &self.kind {
            ModuleKind::Schema(file) => file,
            _ => "*.json",
        }
    }
}

/// Splits the generated items (the types with their impls, then the action table's items) into
/// modules, in file-name order.
///
/// `sources` is [`crate::types::Types::sources`]: the schema file of every definition.
pub fn split(model: &Model, sources: &BTreeMap<String, String>, items: Vec<syn::Item>) -> Result<Vec<Module>, Error> {
    let schema_modules = schema_modules(model)?;
    let mut support = Vec::new();
    let mut table = Vec::new();
    // Each type's definition and impls, in typify's (name) order.
    let mut order = Vec::new();
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for item in items {
        match place(&item)? {
            Place::Support => support.push(item),
            Place::Table => table.push(item),
            Place::Type(name) => {
                let group = groups.entry(name.clone()).or_default();
                match &item {
                    syn::Item::Impl(imp) if imp.trait_.is_some() => group.trait_impls.push(item),
                    syn::Item::Impl(_) => group.inherent_impls.push(item),
                    _ if group.definition.is_some() => {
                        return Err(Error::Typify(format!("two generated types are named {name}")));
                    }
                    _ => {
                        order.push(name);
                        group.definition = Some(item);
                    }
                }
            }
        }
    }
    if let Some((name, _)) = groups.iter().find(|(_, group)| group.definition.is_none()) {
        return Err(Error::Typify(format!("an impl for {name}, which is not a generated type")));
    }

    let module_of = assign(model, &groups, &table, sources, &schema_modules)?;
    let support_names: BTreeSet<String> = support
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(module) => Some(module.ident.to_string()),
            _ => None,
        })
        .collect();

    let mut contents: BTreeMap<String, Vec<syn::Item>> = BTreeMap::new();
    for name in &order {
        let Some(group) = groups.remove(name) else { continue };
        let module = module_of.get(name).map(String::as_str).unwrap_or(SHARED);
        let items = contents.entry(module.to_owned()).or_default();
        items.extend(group.definition);
        items.extend(group.inherent_impls);
        items.extend(group.trait_impls);
    }
    if !table.is_empty() {
        contents.entry(TABLE.to_owned()).or_default().extend(table);
    }

    let mut modules = Vec::new();
    for (name, mut items) in contents {
        let kind = match schema_modules.iter().find(|(_, module)| **module == name) {
            Some((file, _)) => ModuleKind::Schema(file.clone()),
            None if name == TABLE => ModuleKind::Table,
            None if name == IDS => ModuleKind::Ids,
            None => ModuleKind::Shared,
        };
        let mut to_parent = SupportPaths { names: &support_names };
        for item in &mut items {
            to_parent.visit_item_mut(item);
        }
        let mut all = imports(&name, &items, &module_of);
        all.append(&mut items);
        modules.push(Module { doc: module_doc(&name, &kind, model), name, kind, items: all });
    }
    for item in support {
        let syn::Item::Mod(module) = item else { continue };
        let name = module.ident.to_string();
        let items = module.content.map(|(_, items)| items).unwrap_or_default();
        let doc = module_doc(&name, &ModuleKind::Support, model);
        modules.push(Module { name, kind: ModuleKind::Support, doc, items });
    }
    modules.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(modules)
}

/// `generated/mod.rs`: the module declarations, then the re-exports that keep every path flat.
pub fn root(modules: &[Module]) -> [syn::File; 2] {
    let mut declarations: Vec<syn::Item> = Vec::new();
    let mut reexports: Vec<syn::Item> = Vec::new();
    for module in modules {
        let name = format_ident!("{}", module.name);
        if module.kind == ModuleKind::Support {
            declarations.push(syn::parse_quote!(pub mod #name;));
        } else if module.kind == ModuleKind::Ids {
            // The crate root re-exports the ids too (`seed_agents_protocol::AgentId`).
            declarations.push(syn::parse_quote!(pub(crate) mod #name;));
            reexports.push(syn::parse_quote!(pub use #name::*;));
        } else {
            declarations.push(syn::parse_quote!(mod #name;));
            reexports.push(syn::parse_quote!(pub use #name::*;));
        }
    }
    [declarations, reexports].map(|items| syn::File { shebang: None, attrs: Vec::new(), items })
}

/// The `//!` doc of `generated/mod.rs`.
pub fn root_doc(modules: &[Module]) -> Vec<String> {
    let mut doc = vec![
        "The protocol types, generated from the JSON Schema.".to_owned(),
        String::new(),
        "One module per schema file, each type followed by its impls. Every item is re-exported here,".to_owned(),
        "so its path is `generated::Name` whichever file defines it:".to_owned(),
        String::new(),
    ];
    for module in modules {
        let what = match &module.kind {
            ModuleKind::Schema(file) => format!("`schema/json/{file}`"),
            ModuleKind::Table => "the `ACTIONS` table and the schema's version constants".to_owned(),
            ModuleKind::Shared => "typify's types no single schema file owns".to_owned(),
            ModuleKind::Ids => "the typed ids of the schema's `x-ids` table (`AgentId`, …)".to_owned(),
            ModuleKind::Support => "typify's support items, shared (not re-exported)".to_owned(),
        };
        doc.push(format!("- `{}`: {what}", module.name));
    }
    doc
}

/// A type's definition and its impls.
#[derive(Default)]
struct Group {
    definition: Option<syn::Item>,
    inherent_impls: Vec<syn::Item>,
    trait_impls: Vec<syn::Item>,
}

/// Where an item goes.
enum Place {
    /// With the type of that name (its definition, or an impl for it).
    Type(String),
    /// To `table`.
    Table,
    /// A support module of its own.
    Support,
}

fn place(item: &syn::Item) -> Result<Place, Error> {
    Ok(match item {
        syn::Item::Struct(item) => Place::Type(item.ident.to_string()),
        syn::Item::Enum(item) => Place::Type(item.ident.to_string()),
        syn::Item::Type(item) => Place::Type(item.ident.to_string()),
        syn::Item::Union(item) => Place::Type(item.ident.to_string()),
        syn::Item::Impl(item) => match local_type(&item.self_ty).or_else(|| trait_argument(item)) {
            Some(name) => Place::Type(name),
            None => return Err(Error::Typify("an impl whose self type is not a generated type".into())),
        },
        syn::Item::Const(_) | syn::Item::Static(_) => Place::Table,
        syn::Item::Mod(item) if item.content.is_some() => Place::Support,
        _ => return Err(Error::Typify("an item codegen cannot place in a module (not a type, impl or const)".into())),
    })
}

/// The name of a type written as one bare identifier (`AgentAction`, not `::std::string::String`
/// nor `Vec<T>`).
fn local_type(ty: &syn::Type) -> Option<String> {
    let syn::Type::Path(syn::TypePath { qself: None, path }) = ty else { return None };
    match (path.leading_colon, path.segments.first()) {
        (None, Some(segment)) if path.segments.len() == 1 && segment.arguments.is_none() => {
            Some(segment.ident.to_string())
        }
        _ => None,
    }
}

/// For an impl of a trait for a foreign type (`impl From<AgentId> for String`), the generated type
/// among the trait's generic arguments.
fn trait_argument(item: &syn::ItemImpl) -> Option<String> {
    let (_, path, _) = item.trait_.as_ref()?;
    let syn::PathArguments::AngleBracketed(args) = &path.segments.last()?.arguments else { return None };
    args.args.iter().find_map(|arg| match arg {
        syn::GenericArgument::Type(ty) => local_type(ty),
        _ => None,
    })
}

/// The module of each schema file, by file name: its stem, which must be an identifier that names
/// no other generated module.
fn schema_modules(model: &Model) -> Result<BTreeMap<String, String>, Error> {
    let mut modules = BTreeMap::new();
    for file in model.files.keys() {
        let stem = file.strip_suffix(".json").unwrap_or(file);
        let valid = syn::parse_str::<syn::Ident>(stem).is_ok()
            && stem.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid || [TABLE, SHARED, IDS, "mod", "error"].contains(&stem) {
            return Err(Error::Schema(format!(
                "{file}: its generated module would be `{stem}`, which is not a lowercase Rust identifier or is \
                 taken (`table`, `shared`, `ids`, `mod`, `error`); rename the file"
            )));
        }
        modules.insert(file.clone(), stem.to_owned());
    }
    Ok(modules)
}

/// Which module each type goes to.
fn assign(
    model: &Model,
    groups: &BTreeMap<String, Group>,
    table: &[syn::Item],
    sources: &BTreeMap<String, String>,
    schema_modules: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, Error> {
    let names: BTreeSet<&str> = groups.keys().map(String::as_str).collect();
    let mut module_of = BTreeMap::new();
    let mut unplaced = BTreeSet::new();
    for name in groups.keys() {
        if model.ids.contains_key(name) {
            module_of.insert(name.clone(), IDS.to_owned());
            continue;
        }
        match sources.get(&key(name)) {
            Some(file) => {
                let module = schema_modules
                    .get(file)
                    .ok_or_else(|| Error::Schema(format!("{name} comes from {file}, which is not a schema file")))?;
                module_of.insert(name.clone(), module.clone());
            }
            None => {
                unplaced.insert(name.clone());
            }
        }
    }
    // Who uses each type: the types whose definition or impls name it, and the table.
    let mut users: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
    for (user, group) in groups {
        let items = group.definition.iter().chain(&group.inherent_impls).chain(&group.trait_impls);
        for used in items.flat_map(|item| used_names(item, &names)) {
            if used != *user {
                users.entry(used).or_default().insert(Some(user.clone()));
            }
        }
    }
    for used in table.iter().flat_map(|item| used_names(item, &names)) {
        users.entry(used).or_default().insert(None);
    }
    // A type goes where its users are, once they are all placed; typify's types can nest
    // (`ABC` used by `AB`, used by `A`), so this runs until nothing moves.
    loop {
        let mut placed = Vec::new();
        for name in &unplaced {
            let modules: Option<BTreeSet<String>> = users
                .get(name)
                .into_iter()
                .flatten()
                .map(|user| match user {
                    Some(user) => module_of.get(user).cloned(),
                    None => Some(TABLE.to_owned()),
                })
                .collect();
            let Some(modules) = modules else { continue };
            let module = match modules.len() {
                1 => modules.into_iter().next().unwrap_or_else(|| SHARED.to_owned()),
                _ => SHARED.to_owned(),
            };
            placed.push((name.clone(), module));
        }
        if placed.is_empty() {
            break;
        }
        for (name, module) in placed {
            unplaced.remove(&name);
            module_of.insert(name, module);
        }
    }
    // What is left is used through another unplaced type (a cycle): no single owner.
    for name in unplaced {
        module_of.insert(name, SHARED.to_owned());
    }
    Ok(module_of)
}

/// The generated types an item names in code: the first segment of each relative path
/// (`AgentInfo`, `Vec<AgentInfo>`'s argument, `AgentAction::CreateAgent`).
fn used_names(item: &syn::Item, names: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut finder = NameFinder { names, found: BTreeSet::new() };
    finder.visit_item(item);
    finder.found
}

struct NameFinder<'a> {
    names: &'a BTreeSet<&'a str>,
    found: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for NameFinder<'_> {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none()
            && let Some(first) = path.segments.first()
        {
            let ident = first.ident.to_string();
            if self.names.contains(ident.as_str()) {
                self.found.insert(ident);
            }
        }
        syn::visit::visit_path(self, path);
    }
}

/// Rewrites typify's `self::error::ConversionError` (written for one flat module) to
/// `super::error::ConversionError`: support modules are siblings of the modules that use them.
struct SupportPaths<'a> {
    names: &'a BTreeSet<String>,
}

impl VisitMut for SupportPaths<'_> {
    fn visit_path_mut(&mut self, path: &mut syn::Path) {
        let mut segments = path.segments.iter_mut();
        if path.leading_colon.is_none()
            && let (Some(first), Some(second)) = (segments.next(), segments.next())
            && first.ident == "self"
            && self.names.contains(&second.ident.to_string())
        {
            first.ident = format_ident!("super");
        }
        syn::visit_mut::visit_path_mut(self, path);
    }
}

/// The `use` items of module `name`: every generated type its items name that another module
/// defines, grouped by module. Types its docs link to but its code does not name are imported for
/// rustdoc only (`#[cfg(doc)]`), so the link resolves without an unused import.
fn imports(name: &str, items: &[syn::Item], module_of: &BTreeMap<String, String>) -> Vec<syn::Item> {
    let names: BTreeSet<&str> = module_of.keys().map(String::as_str).collect();
    let foreign = |found: BTreeSet<String>| -> BTreeSet<String> {
        found.into_iter().filter(|used| module_of.get(used).map(String::as_str).unwrap_or(SHARED) != name).collect()
    };
    let code = foreign(items.iter().flat_map(|item| used_names(item, &names)).collect());
    let mut links = DocLinks { names: &names, found: BTreeSet::new() };
    for item in items {
        links.visit_item(item);
    }
    let docs: BTreeSet<String> = foreign(links.found).difference(&code).cloned().collect();
    let mut out = Vec::new();
    for (set, for_docs) in [(code, false), (docs, true)] {
        let mut by_module: BTreeMap<&str, Vec<syn::Ident>> = BTreeMap::new();
        for used in &set {
            let module = module_of.get(used).map(String::as_str).unwrap_or(SHARED);
            by_module.entry(module).or_default().push(format_ident!("{used}"));
        }
        for (module, idents) in by_module {
            let module = format_ident!("{module}");
            let mut item: syn::ItemUse = match idents.as_slice() {
                [one] => syn::parse_quote!(use super::#module::#one;),
                _ => syn::parse_quote!(use super::#module::{#(#idents),*};),
            };
            if for_docs {
                item.attrs.push(syn::parse_quote!(#[cfg(doc)]));
            }
            out.push(syn::Item::Use(item));
        }
    }
    out
}

/// Collects the generated types that intra-doc links in `#[doc]` attributes name:
/// ``[`AgentInfo`]`` and ``[`CreateAgent::new`]``.
struct DocLinks<'a> {
    names: &'a BTreeSet<&'a str>,
    found: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for DocLinks<'_> {
    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if attr.path().is_ident("doc")
            && let syn::Meta::NameValue(nv) = &attr.meta
            && let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &nv.value
        {
            for link in text.value().split("[`").skip(1) {
                let Some((target, _)) = link.split_once("`]") else { continue };
                let name = target.split("::").next().unwrap_or_default();
                if self.names.contains(name) {
                    self.found.insert(name.to_owned());
                }
            }
        }
    }
}

/// The `//!` doc of module `name`.
fn module_doc(name: &str, kind: &ModuleKind, model: &Model) -> Vec<String> {
    match kind {
        ModuleKind::Schema(file) => {
            let title = model.files.get(file).map(|title| title.trim()).unwrap_or_default();
            let mut doc = Vec::new();
            if !title.is_empty() {
                doc.push(if title.ends_with('.') { title.to_owned() } else { format!("{title}.") });
                doc.push(String::new());
            }
            doc.extend([
                format!("The types `schema/json/{file}` defines, with the inline ones named after them, each"),
                "followed by its impls: constructor and setters, then trait impls (for an action or a".to_owned(),
                "response, its row of the `Action`/`Response` table).".to_owned(),
            ]);
            doc
        }
        ModuleKind::Table => vec![
            "The action table as data: `ACTIONS` (one row per action, sorted by name) and the protocol".to_owned(),
            "versions the schema states. Each action's and response's trait impl sits next to its type.".to_owned(),
        ],
        ModuleKind::Ids => vec![
            "The typed ids: one newtype per entry of the schema's `x-ids` table, for the properties whose".to_owned(),
            "`x-id` names it. Each is a string on the wire (`#[serde(transparent)]`), so it changes no".to_owned(),
            "encoded byte; decoding checks nothing (an empty id decodes).".to_owned(),
        ],
        ModuleKind::Shared => vec![
            "Types typify named itself for inline schemas used from several schema files (or from none):".to_owned(),
            "they have no single owning file, so they are shared here.".to_owned(),
        ],
        ModuleKind::Support => vec![
            format!("typify's `{name}` module: support items the generated types share (their `TryFrom` and"),
            "`FromStr` impls return `error::ConversionError`). No schema file defines them, so they are".to_owned(),
            "in no schema file's module; the path is the one typify gives them.".to_owned(),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn model() -> Model {
        let documents = vec![
            (
                "agents.json".to_owned(),
                json!({"title": "Agents", "x-protocol": 3, "x-min-client-protocol": 1, "$defs": {
                    "Agent": {"type": "object", "properties": {"status": {"type": "string"}}},
                    "GetAgent": {"type": "object", "properties": {}},
                }}),
            ),
            (
                "runs.json".to_owned(),
                json!({"$defs": {"Run": {"type": "object", "properties": {"status": {"type": "string"}}}}}),
            ),
        ];
        Model::from_documents(documents).expect("model")
    }

    fn sources() -> BTreeMap<String, String> {
        [("agent", "agents.json"), ("getagent", "agents.json"), ("run", "runs.json")]
            .into_iter()
            .map(|(name, file)| (name.to_owned(), file.to_owned()))
            .collect()
    }

    fn module<'a>(modules: &'a [Module], name: &str) -> &'a Module {
        modules.iter().find(|module| module.name == name).expect("module exists")
    }

    /// The module's items as one formatted file.
    fn text(module: &Module) -> String {
        prettyplease::unparse(&syn::File { shebang: None, attrs: Vec::new(), items: module.items.clone() })
    }

    #[test]
    fn types_go_to_their_schema_file_and_impls_follow_their_type() {
        let file: syn::File = syn::parse_quote! {
            pub struct Agent { pub status: AgentStatus, pub run: ::std::option::Option<Run> }
            pub enum AgentStatus { Idle }
            /// Links [`Status`] and [`GetAgent::new`].
            pub struct GetAgent {}
            pub struct Run { pub status: Status }
            pub enum Status { Done }
            pub mod error { pub struct ConversionError; }
            impl ::std::str::FromStr for AgentStatus {
                type Err = self::error::ConversionError;
                fn from_str(_: &str) -> ::std::result::Result<Self, self::error::ConversionError> { Ok(Self::Idle) }
            }
            impl Agent { pub fn new() -> Self { Self::default() } }
            impl crate::Action for GetAgent { type Response = Agent; }
            impl GetAgent { pub fn new() -> Self { Self {} } }
            pub const ACTIONS: &[&str] = &["GetAgent"];
        };
        let modules = split(&model(), &sources(), file.items).expect("split");
        let names: Vec<&str> = modules.iter().map(|module| module.name.as_str()).collect();
        assert_eq!(names, ["agents", "error", "runs", "table"]);

        let agents = module(&modules, "agents");
        assert_eq!(agents.kind, ModuleKind::Schema("agents.json".into()));
        assert_eq!(agents.doc.first().map(String::as_str), Some("Agents."));
        // typify's `AgentStatus` follows its only user; `self::error` becomes the sibling module;
        // `Status`, only linked from docs, is imported for rustdoc alone; inherent impls come first.
        let expected: syn::File = syn::parse_quote! {
            use super::runs::Run;
            #[cfg(doc)]
            use super::runs::Status;
            pub struct Agent { pub status: AgentStatus, pub run: ::std::option::Option<Run> }
            impl Agent { pub fn new() -> Self { Self::default() } }
            pub enum AgentStatus { Idle }
            impl ::std::str::FromStr for AgentStatus {
                type Err = super::error::ConversionError;
                fn from_str(_: &str) -> ::std::result::Result<Self, super::error::ConversionError> { Ok(Self::Idle) }
            }
            /// Links [`Status`] and [`GetAgent::new`].
            pub struct GetAgent {}
            impl GetAgent { pub fn new() -> Self { Self {} } }
            impl crate::Action for GetAgent { type Response = Agent; }
        };
        assert_eq!(text(agents), prettyplease::unparse(&expected));
        assert_eq!(module(&modules, "error").kind, ModuleKind::Support);
        assert!(text(module(&modules, "runs")).contains("pub enum Status"));
        assert!(text(module(&modules, "table")).contains("pub const ACTIONS"));
    }

    #[test]
    fn a_type_used_from_two_schema_files_is_shared_and_imported_by_both() {
        let file: syn::File = syn::parse_quote! {
            pub struct Agent { pub status: Status }
            pub struct GetAgent {}
            pub struct Run { pub status: Status }
            pub enum Status { Done }
        };
        let modules = split(&model(), &sources(), file.items).expect("split");
        let shared = module(&modules, "shared");
        assert_eq!(shared.kind, ModuleKind::Shared);
        assert!(text(shared).contains("pub enum Status"));
        for name in ["agents", "runs"] {
            assert!(text(module(&modules, name)).starts_with("use super::shared::Status;"), "{name}");
        }
        let root = root(&modules).map(|file| prettyplease::unparse(&file)).concat();
        assert!(root.contains("mod shared;") && root.contains("pub use shared::*;"), "{root}");
    }

    #[test]
    fn typed_ids_go_to_ids_with_their_impls_for_foreign_types() {
        let documents = vec![(
            "agents.json".to_owned(),
            json!({"x-protocol": 3, "x-min-client-protocol": 1,
            "x-ids": {"AgentId": {"description": "An agent."}},
            "$defs": {
                "Agent": {"type": "object", "properties": {"id": {"type": "string", "x-id": "AgentId"}}},
            }}),
        )];
        let model = Model::from_documents(documents).expect("model");
        let sources = [("agent".to_owned(), "agents.json".to_owned())].into();
        let file: syn::File = syn::parse_quote! {
            pub struct Agent { pub id: AgentId }
            pub struct AgentId(::std::string::String);
            impl ::std::convert::From<AgentId> for ::std::string::String {
                fn from(value: AgentId) -> Self { value.0 }
            }
            impl ::std::cmp::PartialEq<AgentId> for &::std::primitive::str {
                fn eq(&self, other: &AgentId) -> bool { *self == other.0 }
            }
            impl AgentId { pub fn as_str(&self) -> &str { &self.0 } }
        };
        let modules = split(&model, &sources, file.items).expect("split");
        let names: Vec<&str> = modules.iter().map(|module| module.name.as_str()).collect();
        assert_eq!(names, ["agents", "ids"]);
        let ids = module(&modules, "ids");
        assert_eq!(ids.kind, ModuleKind::Ids);
        let printed = text(ids);
        assert!(printed.starts_with("pub struct AgentId"), "{printed}");
        assert!(printed.contains("From<AgentId> for ::std::string::String"), "{printed}");
        assert!(printed.contains("PartialEq<AgentId> for &::std::primitive::str"), "{printed}");
        let (inherent, from) = (printed.find("impl AgentId"), printed.find("impl ::std::convert::From"));
        assert!(inherent < from, "inherent impls first: {printed}");
        assert!(text(module(&modules, "agents")).starts_with("use super::ids::AgentId;"));
        let root = root(&modules).map(|file| prettyplease::unparse(&file)).concat();
        assert!(root.contains("pub(crate) mod ids;") && root.contains("pub use ids::*;"), "{root}");
    }

    #[test]
    fn an_impl_for_a_type_that_is_not_generated_is_refused() {
        let file: syn::File = syn::parse_quote! {
            pub struct Agent {}
            impl ::std::fmt::Display for ::std::string::String {}
        };
        let Err(Error::Typify(message)) = split(&model(), &sources(), file.items) else { panic!("placed") };
        assert!(message.contains("not a generated type"), "{message}");
    }
}
