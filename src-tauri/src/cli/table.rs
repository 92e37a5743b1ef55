//! The subcommands' text tables: columns as wide as their widest cell, two
//! spaces apart, the last column left unpadded (it holds a sentence).

/// The header's line and then each row's, each ending in a newline; the
/// columns `right` names are right-aligned (figures), the others left.
pub(crate) fn lines<const N: usize>(
    header: [&str; N],
    rows: &[[String; N]],
    right: impl Fn(usize) -> bool,
) -> Vec<String> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else if right(i) {
                s.push_str(&format!("{cell:>w$}  "));
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    std::iter::once(line(header)).chain(rows.iter().map(|row| line(row.each_ref().map(String::as_str)))).collect()
}
