//! The flamegraph on the recording page: an SVG document (as inferno writes it) embedded
//! as a `data:` URL in an `<iframe>`, unless it would fetch from the network. Holds the small
//! XML attribute scanner that finds the root element's height and any external reference
//! (`href`/`src` URLs, CSS `url(…)`, `@import`).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::export::escape::escape;

/// The flamegraph as a `data:` iframe, or a note explaining why it is missing.
pub(super) fn flamegraph_section(svg: &[u8]) -> String {
    let text = String::from_utf8_lossy(svg);
    if !text.contains("<svg") {
        return "<p class=\"note\">Flamegraph omitted: the data given is not an SVG document.</p>\n".into();
    }
    if let Some(reference) = external_reference(&text) {
        return format!(
            "<p class=\"note\">Flamegraph omitted: it refers to an external resource ({}), so embedding it would \
             make this page fetch from the network.</p>\n",
            escape(&reference)
        );
    }
    let height = svg_height(&text).unwrap_or(600.0).clamp(120.0, 20_000.0);
    format!(
        "<p class=\"note\">Click a frame to zoom, Ctrl-F to search.</p>\n<iframe class=\"flame\" title=\"Flamegraph\" \
         style=\"height:{}px\" src=\"data:image/svg+xml;base64,{}\"></iframe>\n",
        height.ceil(),
        base64(svg)
    )
}

/// `height` of the root `<svg>` element in px, if given as a plain number.
fn svg_height(svg: &str) -> Option<f64> {
    let start = svg.find("<svg")?;
    let tag = &svg[start..start + svg[start..].find('>')?];
    let value = attribute_values(tag)
        .into_iter()
        .find(|(name, _)| name == "height")?
        .1;
    value
        .trim()
        .trim_end_matches("px")
        .parse()
        .ok()
        .filter(|h: &f64| h.is_finite())
}

/// `(name, value)` of every `name="value"` / `name='value'` in `text`.
fn attribute_values(text: &str) -> Vec<(String, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(eq) = text[i..].find('=').map(|p| p + i) {
        i = eq + 1;
        let mut q = eq + 1;
        while q < bytes.len() && bytes[q].is_ascii_whitespace() {
            q += 1;
        }
        let Some(&quote) = bytes.get(q) else { break };
        if quote != b'"' && quote != b'\'' {
            continue;
        }
        let Some(end) = text[q + 1..].find(quote as char).map(|p| p + q + 1) else {
            break;
        };
        let mut n = eq;
        while n > 0 && bytes[n - 1].is_ascii_whitespace() {
            n -= 1;
        }
        let name_end = n;
        while n > 0 && (bytes[n - 1].is_ascii_alphanumeric() || b":-_".contains(&bytes[n - 1])) {
            n -= 1;
        }
        out.push((
            text[n..name_end].to_ascii_lowercase(),
            text[q + 1..end].to_string(),
        ));
        i = end + 1;
    }
    out
}

/// The first reference in `svg` a browser would fetch from the network: an attribute value
/// that is an absolute or scheme-relative URL (namespace declarations, `xmlns…`, are names,
/// not fetched), a CSS `url(…)` that is not a fragment or `data:`, or an `@import`.
fn external_reference(svg: &str) -> Option<String> {
    let is_remote = |url: &str| {
        let url = url
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .trim()
            .to_ascii_lowercase();
        !(url.is_empty()
            || url.starts_with('#')
            || url.starts_with("data:")
            || url.starts_with("javascript:"))
            && (url.starts_with("//") || url.contains(':'))
    };
    for (name, value) in attribute_values(svg) {
        if name.starts_with("xmlns") || !matches!(name.rsplit(':').next(), Some("href" | "src")) {
            continue;
        }
        if is_remote(&value) {
            return Some(value);
        }
    }
    let lower = svg.to_ascii_lowercase();
    if let Some(at) = lower.find("@import") {
        return Some(svg[at..].chars().take(60).collect());
    }
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("url(") {
        let after = &rest[at + 4..];
        let url = &after[..after.find(')').unwrap_or(after.len())];
        if is_remote(url) {
            return Some(format!("url({url})"));
        }
        rest = after;
    }
    None
}

/// Standard base64 with padding (RFC 4648), for the `data:` URL.
fn base64(data: &[u8]) -> String {
    STANDARD.encode(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::html::render_recording;
    use crate::export::html::tests::recording;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    /// The `base64` crate's output is byte-identical to the encoder it replaced (whose
    /// output these strings are), padding included, for every length modulo 3.
    #[test]
    fn base64_matches_the_former_encoder() {
        let expected = [
            "",
            "+w==",
            "+5g=",
            "+5g1",
            "+5g10g==",
            "+5g10m8=",
            "+5g10m8M",
            "+5g10m8MqQ==",
            "+5g10m8MqUY=",
            "+5g10m8MqUbj",
            "+5g10m8MqUbjgA==",
        ];
        for (n, encoded) in expected.into_iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|i| ((i * 0x9d + 0xfb) % 256) as u8).collect();
            assert_eq!(base64(&bytes), encoded, "{n} bytes");
        }
        let every_byte: Vec<u8> = (0..=255u8).rev().collect();
        assert_eq!(
            base64(&every_byte),
            "//79/Pv6+fj39vX08/Lx8O/u7ezr6uno5+bl5OPi4eDf3t3c29rZ2NfW1dTT0tHQz87NzMvKycjHxsXEw8LBwL++\
             vby7urm4t7a1tLOysbCvrq2sq6qpqKempaSjoqGgn56dnJuamZiXlpWUk5KRkI+OjYyLiomIh4aFhIOCgYB/fn18\
             e3p5eHd2dXRzcnFwb25tbGtqaWhnZmVkY2JhYF9eXVxbWllYV1ZVVFNSUVBPTk1MS0pJSEdGRURDQkFAPz49PDs6\
             OTg3NjU0MzIxMC8uLSwrKikoJyYlJCMiISAfHh0cGxoZGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwIBAA=="
        );
    }

    #[test]
    fn external_references_are_found_and_namespaces_are_not() {
        let ok = r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink"><a xlink:href="#x"/><rect style="fill:url(#g)"/><image href="data:image/png;base64,AA"/></svg>"##;
        assert_eq!(external_reference(ok), None);
        for bad in [
            r#"<svg><image href="https://example.com/x.png"/></svg>"#,
            r#"<svg><image xlink:href = '//cdn.example/x.png'/></svg>"#,
            r#"<svg><style>@import "x.css";</style></svg>"#,
            r#"<svg><rect style="fill:url( 'http://x/y#g' )"/></svg>"#,
            r#"<svg><script src="http://x/y.js"/></svg>"#,
        ] {
            assert!(external_reference(bad).is_some(), "{bad}");
            assert!(
                render_recording(&recording("f", &[1]), Some(bad.as_bytes()))
                    .contains("Flamegraph omitted")
            );
        }
        assert!(render_recording(&recording("f", &[1]), Some(b"not svg")).contains("not an SVG"));
    }

    #[test]
    fn svg_height_reads_the_root_element() {
        assert_eq!(
            svg_height(r#"<?xml?><svg width="1200" height="342.5px">"#),
            Some(342.5)
        );
        assert_eq!(svg_height(r#"<svg width="100%">"#), None);
    }
}
