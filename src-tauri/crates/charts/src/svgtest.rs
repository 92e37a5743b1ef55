//! Test helpers: parse a rendered chart as XML and read its marks and labels.

use plotters::style::RGBColor;
use roxmltree::{Document, Node};

/// How plotters writes a colour in SVG.
pub(crate) fn hex(c: RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

pub(crate) fn parse(svg: &str) -> Document<'_> {
    Document::parse(svg).expect("the chart is well-formed SVG")
}

fn circles<'a>(doc: &'a Document<'a>) -> impl Iterator<Item = Node<'a, 'a>> {
    doc.descendants().filter(|n| n.has_tag_name("circle"))
}

/// Filled marks of one colour: (cx, cy) in document order.
pub(crate) fn filled(doc: &Document<'_>, color: RGBColor) -> Vec<(f64, f64)> {
    let c = hex(color);
    circles(doc).filter(|n| n.attribute("fill") == Some(c.as_str())).map(center).collect()
}

/// Hollow rings of one colour (points without a value).
pub(crate) fn rings(doc: &Document<'_>, color: RGBColor) -> Vec<(f64, f64)> {
    let c = hex(color);
    circles(doc)
        .filter(|n| n.attribute("fill") == Some("none") && n.attribute("stroke") == Some(c.as_str()))
        .map(center)
        .collect()
}

pub(crate) fn circle_count(doc: &Document<'_>) -> usize {
    circles(doc).count()
}

fn center(n: Node<'_, '_>) -> (f64, f64) {
    let num = |a| n.attribute(a).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
    (num("cx"), num("cy"))
}

/// Every text element's content, trimmed.
pub(crate) fn texts(doc: &Document<'_>) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default().trim().to_owned())
        .collect()
}

pub(crate) fn has_text(doc: &Document<'_>, text: &str) -> bool {
    texts(doc).iter().any(|t| t == text)
}

/// The root element's width attribute, px.
pub(crate) fn width(doc: &Document<'_>) -> Option<u32> {
    doc.root_element().attribute("width").and_then(|w| w.parse().ok())
}

/// The fill of the first rect: the background.
pub(crate) fn background(doc: &Document<'_>) -> Option<String> {
    doc.descendants().find(|n| n.has_tag_name("rect")).and_then(|n| n.attribute("fill")).map(str::to_owned)
}
