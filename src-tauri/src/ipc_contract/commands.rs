//! The commands half of the IPC contract: every `#[tauri::command]` in
//! `src/commands/`, read from its signature (with `syn`, as Tauri's own
//! macro reads it), written as one TypeScript interface, `Commands`: each
//! command's arguments as the UI passes them (camelCase keys, as Tauri
//! renames them; an `Option` argument may be left out) and its reply (the
//! `Ok` of a `Result`). The UI calls commands only through it
//! (`ui/src/lib/ipc/invoke.ts`'s `command`), so renaming an argument or
//! changing a reply in Rust fails the UI's type check until the contract is
//! regenerated and the callers follow.
//!
//! Also checked here: the commands `lib.rs` registers are exactly those
//! defined, and every named type a signature uses is one the contract
//! generates (`super::contract`), so nothing is typed by hand.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::{FnArg, GenericArgument, Item, Pat, PathArguments, ReturnType, Type};

/// Arguments Tauri fills itself: never sent by the UI.
const INJECTED: [&str; 5] = ["State", "AppHandle", "Window", "WebviewWindow", "Webview"];

/// One command, as the UI sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub name: String,
    /// (key, TypeScript type, may be left out)
    pub args: Vec<(String, String, bool)>,
    pub reply: String,
}

/// Every command defined in the `.rs` files of `dir`, by name.
pub fn read(dir: &Path) -> Result<BTreeMap<String, Command>, String> {
    let mut out = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        for item in parsed.items {
            let Item::Fn(f) = item else { continue };
            let Some(attr) = f.attrs.iter().find(|a| a.path().segments.last().is_some_and(|s| s.ident == "command"))
            else {
                continue;
            };
            let snake = attr.meta.require_list().is_ok_and(|l| l.tokens.to_string().contains("\"snake_case\""));
            let name = f.sig.ident.to_string();
            let at = |what: String| format!("{}: {name}: {what}", file.display());
            let mut args = Vec::new();
            for input in &f.sig.inputs {
                let FnArg::Typed(arg) = input else { return Err(at("a method, not a function".into())) };
                if last_ident(&arg.ty).is_some_and(|i| INJECTED.contains(&i.as_str())) {
                    continue;
                }
                let Pat::Ident(ident) = &*arg.pat else {
                    return Err(at("an argument that is not a plain name".into()));
                };
                // `r#override` is `override` to the UI.
                let key = ident.ident.to_string().trim_start_matches("r#").to_owned();
                let key = if snake { key } else { camel(&key) };
                let optional = last_ident(&arg.ty).is_some_and(|i| i == "Option");
                args.push((key, ts(&arg.ty).map_err(at)?, optional));
            }
            let reply = match &f.sig.output {
                ReturnType::Default => "null".to_owned(),
                ReturnType::Type(_, ty) => ts(ty).map_err(at)?,
            };
            out.insert(name.clone(), Command { name, args, reply });
        }
    }
    Ok(out)
}

/// The commands `tauri::generate_handler![…]` lists in `lib_rs`.
pub fn registered(lib_rs: &str) -> BTreeSet<String> {
    let Some(start) = lib_rs.find("generate_handler![") else { return BTreeSet::new() };
    let body = &lib_rs[start + "generate_handler![".len()..];
    let body = &body[..body.find(']').unwrap_or(body.len())];
    body.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.rsplit("::").next().unwrap_or(s).to_owned())
        .collect()
}

fn last_ident(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        Type::Reference(r) => last_ident(&r.elem),
        _ => None,
    }
}

/// The type arguments of a path's last segment (`Option<T>` → `[T]`).
fn generics(ty: &Type) -> Vec<&Type> {
    let Type::Path(p) = ty else { return Vec::new() };
    let Some(seg) = p.path.segments.last() else { return Vec::new() };
    let PathArguments::AngleBracketed(a) = &seg.arguments else { return Vec::new() };
    a.args.iter().filter_map(|g| if let GenericArgument::Type(t) = g { Some(t) } else { None }).collect()
}

/// The TypeScript of a Rust type, as ts-rs and serde write it.
fn ts(ty: &Type) -> Result<String, String> {
    if let Type::Reference(r) = ty {
        return ts(&r.elem);
    }
    if let Type::Tuple(t) = ty {
        if t.elems.is_empty() {
            return Ok("null".into());
        }
    }
    let Some(ident) = last_ident(ty) else {
        return Err("a type this generator does not read (a tuple, an array, a fn)".into());
    };
    let inner = generics(ty);
    let one = || inner.first().copied().ok_or_else(|| format!("{ident} without its type argument"));
    Ok(match ident.as_str() {
        "String" | "str" | "PathBuf" | "Path" => "string".into(),
        "bool" => "boolean".into(),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" | "f32" | "f64" => {
            "number".into()
        }
        "Option" => format!("{} | null", ts(one()?)?),
        "Vec" => format!("Array<{}>", ts(one()?)?),
        // A command's failure is the contract's CommandError, whatever the Rust type.
        "Result" => ts(one()?)?,
        "Channel" => format!("Channel<{}>", ts(one()?)?),
        "Value" => "unknown".into(),
        other if inner.is_empty() => other.to_owned(),
        other => return Err(format!("a generic type this generator does not read: {other}<…>")),
    })
}

/// `override_fit` → `overrideFit`, as Tauri renames arguments.
fn camel(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The named types `commands` use (to import, and to check they are generated).
pub fn named_types(commands: &BTreeMap<String, Command>) -> BTreeSet<String> {
    let words = commands.values().flat_map(|c| c.args.iter().map(|a| a.1.as_str()).chain([c.reply.as_str()]));
    words
        .flat_map(|t| t.split(|c: char| !c.is_alphanumeric() && c != '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()) && !["Array", "Channel"].contains(w))
        .map(str::to_owned)
        .collect()
}

/// `commands.ts`.
pub fn typescript(commands: &BTreeMap<String, Command>, note: &str) -> String {
    let mut out = String::from(note);
    out.push_str("import type { Channel } from '@tauri-apps/api/core';\n");
    let types: Vec<String> = named_types(commands).into_iter().collect();
    if !types.is_empty() {
        out.push_str(&format!("import type {{ {} }} from './index';\n", types.join(", ")));
    }
    out.push_str(
        "\n/** Every command the app registers: its arguments as the UI passes them, and its reply. */\nexport interface Commands {\n",
    );
    for c in commands.values() {
        let args = if c.args.is_empty() {
            "Record<string, never>".to_owned()
        } else {
            let fields: Vec<String> =
                c.args.iter().map(|(k, t, opt)| format!("{k}{}: {t}", if *opt { "?" } else { "" })).collect();
            format!("{{ {} }}", fields.join("; "))
        };
        out.push_str(&format!("  {}: {{ args: {args}; reply: {} }};\n", c.name, c.reply));
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_becomes_camel_case_arguments_and_its_ok_reply() {
        let dir = headroom_test_support::scratch("ipc-commands");
        std::fs::write(
            dir.join("x.rs"),
            "#[tauri::command]\npub async fn model_load(id: String, context_limit: Option<usize>, on_event: Channel<ChatEvent>, state: State<'_, AppState>) -> Result<LoadResult, CommandError> { todo!() }\n\
             #[tauri::command(rename_all = \"snake_case\")]\npub fn kept(some_arg: Vec<u64>) {}\n\
             pub fn not_a_command(x: u8) {}\n",
        )
        .unwrap();
        let read = read(&dir).unwrap();
        assert_eq!(read.len(), 2, "{read:?}");
        let load = &read["model_load"];
        assert_eq!(
            load.args,
            [
                ("id".to_owned(), "string".to_owned(), false),
                ("contextLimit".to_owned(), "number | null".to_owned(), true),
                ("onEvent".to_owned(), "Channel<ChatEvent>".to_owned(), false),
            ]
        );
        assert_eq!(load.reply, "LoadResult");
        assert_eq!(read["kept"].args, [("some_arg".to_owned(), "Array<number>".to_owned(), false)]);
        assert_eq!(read["kept"].reply, "null");
        assert_eq!(named_types(&read).into_iter().collect::<Vec<_>>(), ["ChatEvent", "LoadResult"]);
    }

    #[test]
    fn the_registered_list_is_read_from_generate_handler() {
        let lib = "x.invoke_handler(tauri::generate_handler![\n  commands::a::one,\n  commands::b::two,\n])";
        assert_eq!(registered(lib).into_iter().collect::<Vec<_>>(), ["one", "two"]);
    }
}
