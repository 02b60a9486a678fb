//! Screenshots of what Dify shows, in headless Chromium (installed by scripts/ensure-ui-tools.sh):
//! the README the package ships, rendered as Dify's plugin panel renders markdown (every single
//! line break a break) at the panel's 580 px, and the icons on a light and a dark tile, at the
//! sizes Dify draws them, one beside the "installed" check Dify's install dialog puts on its
//! corner. `scripts/screenshots.sh` writes them to docs/screenshots/; otherwise a temporary
//! directory takes them and only their shape is checked.

use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{html, Event, Options, Parser};

use crate::dify_face::{path, PANEL_README};

/// Width of Dify's README panel (plugin detail drawer).
const PANEL_WIDTH: u32 = 580;

/// Where the screenshots go: `STATEFUL_TOOL_SCREENSHOTS_DIR` (the script sets docs/screenshots),
/// else a temporary directory that `_guard` removes.
fn out_dir() -> (PathBuf, Option<tempfile::TempDir>) {
    match std::env::var_os("STATEFUL_TOOL_SCREENSHOTS_DIR") {
        Some(dir) => {
            let dir = path(&dir.to_string_lossy());
            std::fs::create_dir_all(&dir).unwrap();
            (dir, None)
        }
        None => {
            let tmp = tempfile::tempdir().unwrap();
            (tmp.path().to_owned(), Some(tmp))
        }
    }
}

/// Runs headless Chromium on `page` with a fresh profile and no background traffic.
fn chromium(page: &Path, width: u32, height: u32, action: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        .args(["--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(action)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs (scripts/ensure-ui-tools.sh installs it; make test calls it)");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Screenshots `page` at `width`, as tall as its content (measured by a first run that dumps
/// the DOM, where the page has written its height into the title).
fn screenshot(page: &Path, width: u32, png: &Path) -> (u32, u32) {
    let dom = chromium(page, width, 600, "--dump-dom");
    let height: u32 = dom
        .split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .and_then(|(h, _)| h.trim().parse().ok())
        .unwrap_or_else(|| panic!("the page did not report its height: {dom:.300}"));
    chromium(page, width, height, &format!("--screenshot={}", png.display()));
    let size = png_size(&std::fs::read(png).unwrap());
    eprintln!("{}: {}x{} px", png.display(), size.0, size.1);
    size
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR", "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// A page that writes its own height into its title once laid out (read by `--dump-dom`).
fn page(style: &str, body: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>0</title><style>{style}</style></head>\
         <body><div id=all style=\"display:flow-root\">{body}</div>\
         <script>document.title = Math.ceil(document.getElementById('all').getBoundingClientRect().height);</script></body></html>"
    )
}

/// Roughly Dify's markdown panel (light theme): its font, colours and GitHub-like tables,
/// which scroll sideways rather than squeeze.
const PANEL_STYLE: &str = "body{margin:0;background:#fff;color:#354052;font:14px/1.6 Inter,'DejaVu Sans',sans-serif}\
    main{padding:16px 24px}h1{font-size:20px}h2{font-size:16px;margin-top:20px}\
    code{background:#f2f4f7;border-radius:4px;padding:1px 4px;font-size:12.5px}\
    table{display:block;width:max-content;max-width:100%;overflow:auto;border-collapse:collapse}\
    th,td{border:1px solid #e4e7ec;padding:4px 8px;text-align:left;vertical-align:top}\
    ul,ol{padding-left:20px}a{color:#155aef}";

#[test]
fn the_shipped_readme_renders_in_a_580_px_panel() {
    let markdown = std::fs::read_to_string(path(PANEL_README)).unwrap();
    // Dify's renderer (react-markdown with remark-breaks) makes every single line break a break.
    let events = Parser::new_ext(&markdown, Options::ENABLE_TABLES).map(|e| match e {
        Event::SoftBreak => Event::HardBreak,
        other => other,
    });
    let mut body = String::from("<main>");
    html::push_html(&mut body, events);
    body.push_str("</main>");
    let (dir, _guard) = out_dir();
    let html_path = dir.join("dify-panel-readme.html");
    std::fs::write(&html_path, page(PANEL_STYLE, &body)).unwrap();
    let png = dir.join("dify-panel-readme.png");
    let (width, height) = screenshot(&html_path, PANEL_WIDTH, &png);
    assert_eq!(width, PANEL_WIDTH);
    assert!(height > 1000, "the whole README is in the screenshot: {height} px");
    std::fs::remove_file(html_path).unwrap();
}

/// Dify's "installed" mark on a card icon's corner (plugins/card/base/card-icon.tsx): an 18 px
/// green circle with a white check, 4 px outside the bottom-right corner, ringed in the
/// panel's colour.
const CHECK: &str = "<span class=badge><svg viewBox='0 0 24 24' width=12 height=12><path d='M5 12.5l4.5 4.5L19 7.5' \
    fill=none stroke=white stroke-width=3 stroke-linecap=round stroke-linejoin=round /></svg></span>";

fn tile(theme: &str, icon: &Path) -> String {
    let src = format!("file://{}", icon.display());
    let img = |size: u32| {
        format!("<span class=icon style=\"width:{size}px;height:{size}px;background-image:url('{src}')\"></span>")
    };
    format!(
        "<div class=\"tile {theme}\"><span class=icon style=\"width:40px;height:40px;background-image:url('{src}')\">{CHECK}</span>\
         {}{}<span class=name>Exactly-once Events<br><small>{theme}: 40 px installed, 40 px, 24 px</small></span></div>",
        img(40),
        img(24)
    )
}

const TILE_STYLE: &str = "body{margin:0;font:14px/1.4 'DejaVu Sans',sans-serif;background:#f2f4f7}\
    .tile{display:flex;align-items:center;gap:20px;padding:20px 24px;margin:12px;border-radius:12px}\
    .light{background:#fff;color:#101828;--panel:#fff}.dark{background:#222225;color:#fbfbfc;--panel:#222225}\
    .icon{position:relative;display:inline-block;flex-shrink:0;border-radius:6px;background-size:contain;\
    background-position:center;background-repeat:no-repeat}\
    .badge{position:absolute;right:-4px;bottom:-4px;width:18px;height:18px;box-sizing:border-box;border-radius:50%;\
    border:2px solid var(--panel);background:#17b26a;display:flex;align-items:center;justify-content:center}\
    small{opacity:.7}";

#[test]
fn the_icons_read_on_light_and_dark_beside_difys_corner_check() {
    let body = format!("{}{}", tile("light", &path("_assets/icon.svg")), tile("dark", &path("_assets/icon-dark.svg")));
    let (dir, _guard) = out_dir();
    let html_path = dir.join("dify-icons.html");
    std::fs::write(&html_path, page(TILE_STYLE, &body)).unwrap();
    let (width, height) = screenshot(&html_path, PANEL_WIDTH, &dir.join("dify-icons.png"));
    assert_eq!(width, PANEL_WIDTH);
    assert!((150..400).contains(&height), "two tiles: {height} px");
    std::fs::remove_file(html_path).unwrap();
    // No badge of our own in the corner where Dify draws its check: nothing green in the icons.
    for icon in ["_assets/icon.svg", "_assets/icon-dark.svg"] {
        let svg = std::fs::read_to_string(path(icon)).unwrap().to_lowercase();
        for green in ["#16a34a", "#22c55e", "#17b26a", "green"] {
            assert!(!svg.contains(green), "{icon} has {green}");
        }
    }
}
