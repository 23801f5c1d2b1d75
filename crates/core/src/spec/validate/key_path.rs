//! TOML key paths: the dotted key that a byte offset of the source belongs to, read off the text.
//!
//! `toml` gives a serde error a byte span but not the key it is about, and a message that names
//! no key leaves the user to find it.

/// `variant.training.amp` as `variant[i].training.amp`, where `[[variant]]` header number `i`
/// (from 0) is the last before `offset`. Paths of other tables, or a variant written as an inline
/// array, stay as they are.
pub(super) fn number_variant(text: &str, offset: usize, mut path: Vec<String>) -> Vec<String> {
    if path.first().map(String::as_str) != Some("variant") {
        return path;
    }
    let before = text.get(..offset).unwrap_or(text);
    let headers =
        before.lines().filter(|l| l.trim_start().starts_with("[[") && header_keys(l) == ["variant"]).count();
    if let Some(i) = headers.checked_sub(1) {
        path[0] = format!("variant[{i}]");
    }
    path
}

/// The dotted key path open at byte `offset`, not counting a key that starts there: the last
/// `[table]` header above it plus the keys before it on its own line, so the value of
/// `search = { start = "a" }` is at `sweep.search.start` and the key `widht` under `[model]` is
/// in `model`. The flag is true when `offset` is inside a `[table]` header.
///
/// This reads TOML only as far as these messages need; a multi-line array or inline table loses
/// the keys from earlier lines, which only makes a message less specific.
pub(super) fn key_path_at(text: &str, offset: usize) -> (Vec<String>, bool) {
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = &before[line_start..];
    if line.trim_start().starts_with('[') {
        return (header_keys(line), true);
    }
    let mut path = before[..line_start]
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .map(header_keys)
        .unwrap_or_default();
    path.extend(keys_on_line(line));
    (path, false)
}

/// The keys of a `[table]` or `[[table]]` header, or of its beginning up to a partial key.
pub(super) fn header_keys(line: &str) -> Vec<String> {
    let inner = line.trim_start().trim_start_matches('[');
    let inner = inner.split(']').next().unwrap_or_default();
    // `[sweep.` (a header cut before a key) ends in an empty piece, which is dropped.
    inner
        .split('.')
        .map(|k| k.trim().trim_matches(['"', '\'']).to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// The keys that lead to the end of `line` (a line prefix, not a header): inline tables opened
/// and not closed, then the key being assigned or the dotted prefix of a key being written.
fn keys_on_line(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    // Each inline table still open: the keys that lead to it, and how many arrays were open
    // around it (a comma separates its keys only at that depth, not inside an array value).
    let mut open: Vec<(Vec<String>, usize)> = Vec::new();
    let mut key: Vec<String> = Vec::new();
    let mut in_key = true;
    let mut arrays = 0usize;
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        i += 1;
        match c {
            '"' | '\'' => {
                let start = i;
                while let Some(&d) = chars.get(i) {
                    i += 1;
                    if d == '\\' && c == '"' {
                        i += 1;
                    } else if d == c {
                        break;
                    }
                }
                if in_key {
                    let end = i.saturating_sub(1).max(start);
                    key.push(chars.get(start..end).unwrap_or_default().iter().collect());
                }
            }
            '=' if in_key => in_key = false,
            '{' if !in_key => {
                open.push((std::mem::take(&mut key), arrays));
                in_key = true;
            }
            '}' => {
                (key, arrays) = open.pop().unwrap_or_default();
                in_key = false;
            }
            '[' if !in_key => arrays += 1,
            ']' if !in_key => arrays = arrays.saturating_sub(1),
            ',' if open.last().is_some_and(|(_, depth)| *depth == arrays) => {
                key.clear();
                in_key = true;
            }
            '#' => break,
            c if in_key && (c.is_alphanumeric() || c == '_' || c == '-') => {
                let start = i - 1;
                while chars.get(i).is_some_and(|d| d.is_alphanumeric() || *d == '_' || *d == '-') {
                    i += 1;
                }
                key.push(chars.get(start..i).unwrap_or_default().iter().collect());
            }
            _ => {}
        }
    }
    // An unclosed quote leaves an empty key, which names nothing.
    open.into_iter().flat_map(|(keys, _)| keys).chain(key).filter(|k| !k.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_are_found_from_the_text() {
        let text = "[model]\nhidden = 1\n[sweep]\nsearch = { start = \"a\", x = 1 }\nmodel.deep = 3\n";
        let at = |needle: &str| key_path_at(text, text.find(needle).unwrap());
        assert_eq!(at("1\n"), (vec!["model".to_string(), "hidden".to_string()], false));
        assert_eq!(at("\"a\"").0, ["sweep", "search", "start"]);
        assert_eq!(at("x =").0, ["sweep", "search"]);
        assert_eq!(at("deep").0, ["sweep", "model"]);
        assert_eq!(at("sweep]"), (vec![], true));
        assert_eq!(header_keys("[ \"sweep\" . search ]"), ["sweep", "search"]);
        // Inline tables in an array: a comma after an array value starts the next key.
        let text = "[data]\ninputs = [{ shape = [4, 2], name = 7 }, { shape = [1], high = \"x\" }]\n";
        let at = |needle: &str| key_path_at(text, text.find(needle).unwrap());
        assert_eq!(at("7").0, ["data", "inputs", "name"]);
        assert_eq!(at("2]").0, ["data", "inputs", "shape"]);
        assert_eq!(at("\"x\"").0, ["data", "inputs", "high"]);
    }
}
