//! Screenshots of what Dify shows, in headless Chromium (installed by scripts/ensure-ui-tools.sh):
//! both READMEs as Dify's plugin drawer renders markdown (600 px, every single line break a
//! break, its markdown.scss rules for code and tables), checked for inline code broken
//! mid-token; the icons on a light and a dark tile, beside the "installed" check Dify puts on
//! their corner; and (dify_screens_trigger.rs) the trigger's subscription form and node.
//! `scripts/screenshots.sh` writes them to docs/screenshots/; otherwise a temporary directory
//! takes them and only what they show is checked.

use std::path::{Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{html, Event, Options, Parser};

use crate::dify_face::{path, PANEL_README, TRIGGER_README};

#[path = "dify_screens_trigger.rs"]
mod trigger;

/// The screenshots the tests below take, as kept in docs/screenshots/ (scripts/screenshots.sh).
const SHOTS: [&str; 5] =
    ["dify-icons", "dify-panel-readme", "dify-trigger-form", "dify-trigger-node", "dify-trigger-readme"];

/// Width of Dify's README drawer (`plugins/readme-panel`: `w-[600px]`, content `px-4`).
const DRAWER_WIDTH: u32 = 600;

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

/// What a page measured of itself once laid out: its height, and what its `report()` found.
pub(crate) struct Shot {
    pub width: u32,
    pub height: u32,
    pub report: Vec<String>,
}

/// Screenshots the page `html` (written as `name`.html in `dir`, removed after) at `width`,
/// as tall as its content: a first run dumps the DOM, where the page has written its height
/// and its report into its title.
pub(crate) fn shoot(dir: &Path, name: &str, html: &str, width: u32) -> Shot {
    let page_path = dir.join(format!("{name}.html"));
    std::fs::write(&page_path, html).unwrap();
    let dom = chromium(&page_path, width, 600, "--dump-dom");
    let title = dom
        .split_once("<title>")
        .and_then(|(_, rest)| rest.split_once("</title>"))
        .map(|(t, _)| t.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\""))
        .unwrap_or_else(|| panic!("the page has no title: {dom:.300}"));
    let (height, report) = title.split_once('|').unwrap_or((&title, "[]"));
    let height: u32 = height.trim().parse().unwrap_or_else(|_| panic!("the page did not report its height: {title}"));
    let report: Vec<String> = serde_json::from_str(report).unwrap_or_else(|e| panic!("report {report}: {e}"));
    let png = dir.join(format!("{name}.png"));
    chromium(&page_path, width, height, &format!("--screenshot={}", png.display()));
    std::fs::remove_file(page_path).unwrap();
    let (width, height) = png_size(&std::fs::read(&png).unwrap());
    eprintln!("{}: {width}x{height} px", png.display());
    Shot { width, height, report }
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 1000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR", "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

/// A page that writes its height, and what its `report()` returns (a JSON list of strings),
/// into its title once laid out (read by `--dump-dom`).
pub(crate) fn page(style: &str, body: &str, report_js: &str) -> String {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>0</title><style>{style}</style></head>\
         <body><div id=all style=\"display:flow-root\">{body}</div><script>{report_js}\n\
         document.title = Math.ceil(document.getElementById('all').getBoundingClientRect().height)\
         + '|' + JSON.stringify(typeof report === 'function' ? report() : []);</script></body></html>"
    )
}

/// Dify's drawer and its markdown (light theme): markdown.scss (`word-break: break-word`
/// on the body; inline code `white-space: break-spaces` at 85 %; tables `display: block`,
/// `max-width: 100%`, cells `nowrap`) and streamdown's `font-mono` for code.
const DRAWER_STYLE: &str = "body{margin:0;background:#fff}\
    .drawer{padding:12px 16px}\
    .markdown-body{color:#101828;font:15px/1.6 Inter,'DejaVu Sans',sans-serif;word-wrap:break-word;word-break:break-word}\
    h1{font-size:2em;font-weight:600;margin:8px 0 16px;padding-bottom:.3em;border-bottom:1px solid #eaecf0}\
    h2{font-size:1.5em;font-weight:600;margin:24px 0 16px;padding-bottom:.3em;border-bottom:1px solid #eaecf0}\
    p,ul,ol,table{margin:0 0 16px}ul,ol{padding-left:2em}a{color:#155aef;text-decoration:none}\
    code{padding:.2em .4em;margin:0;font-size:85%;white-space:break-spaces;background:rgba(200,206,218,.25);\
    border-radius:6px;font-family:'DejaVu Sans Mono',monospace}\
    pre{padding:16px;background:#f2f4f7;border-radius:8px;overflow:auto}pre code{white-space:pre-wrap;background:none;padding:0}\
    table{border-spacing:0;border-collapse:separate;display:block;width:max-content;max-width:100%;overflow:auto;\
    border:1px solid #eaecf0;border-radius:8px}\
    th{color:#676f83;font-size:12px;font-weight:500;white-space:nowrap;text-align:left}\
    td{color:#354052;font-size:13px;white-space:nowrap}th,td{padding:6px 13px;border-bottom:1px solid #f2f4f7}";

/// Every inline `code` that a line break cuts inside a token (not at a space), as
/// `before|after`: what a reader of the drawer would see split.
const MID_TOKEN_BREAKS: &str = "function report() {\n\
    const cut = [];\n\
    for (const code of document.querySelectorAll('code')) {\n\
      if (code.closest('pre') || !code.firstChild) continue;\n\
      const node = code.firstChild, text = node.textContent;\n\
      let top = null;\n\
      for (let i = 0; i < text.length; i++) {\n\
        const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);\n\
        const rect = range.getClientRects()[0]; if (!rect) continue;\n\
        if (top !== null && rect.top > top + 2 && text[i - 1] !== ' ' && text[i] !== ' ')\n\
          cut.push(text.slice(0, i) + '|' + text.slice(i));\n\
        top = rect.top;\n\
      }\n\
    }\n\
    return cut;\n\
  }";

/// A README as the drawer shows it. Dify's renderer (streamdown with remark-breaks) makes every
/// single line break a break.
fn drawer_html(markdown: &str) -> String {
    let events = Parser::new_ext(markdown, Options::ENABLE_TABLES).map(|e| match e {
        Event::SoftBreak => Event::HardBreak,
        other => other,
    });
    let mut body = String::from("<div class=drawer><div class=markdown-body>");
    html::push_html(&mut body, events);
    body.push_str("</div></div>");
    page(DRAWER_STYLE, &body, MID_TOKEN_BREAKS)
}

#[test]
fn the_shipped_readmes_render_in_difys_drawer_without_breaking_code() {
    let (dir, _guard) = out_dir();
    for (readme, name) in [(PANEL_README, "dify-panel-readme"), (TRIGGER_README, "dify-trigger-readme")] {
        let shot = shoot(&dir, name, &drawer_html(&std::fs::read_to_string(path(readme)).unwrap()), DRAWER_WIDTH);
        assert_eq!(shot.width, DRAWER_WIDTH);
        assert!(shot.height > 800, "the whole README is in the screenshot: {} px", shot.height);
        assert_eq!(shot.report, Vec::<String>::new(), "{readme}: inline code broken mid-token in a 600 px drawer");
    }
}

#[test]
fn the_drawer_shows_a_broken_token_as_broken() {
    // The check itself: a token wider than a squeezed table column is cut, as Dify cut ours.
    let markdown = "| Output | Values |\n|---|---|\n\
        | `outcome` (Complete event) | `completed`, `already_completed`, `failed`, `already_failed` |\n";
    let (dir, _guard) = out_dir();
    let shot = shoot(&dir, "dify-drawer-check", &drawer_html(markdown), DRAWER_WIDTH);
    std::fs::remove_file(dir.join("dify-drawer-check.png")).unwrap();
    assert!(!shot.report.is_empty(), "a squeezed column's code is reported cut");
}

/// Dify's "installed" mark on a card icon's corner (plugins/card/base/card-icon.tsx): an 18 px
/// green circle with a white check, 4 px outside the bottom-right corner, ringed in the
/// panel's colour.
const CHECK: &str = "<span class=badge><svg viewBox='0 0 24 24' width=12 height=12><path d='M5 12.5l4.5 4.5L19 7.5' \
    fill=none stroke=white stroke-width=3 stroke-linecap=round stroke-linejoin=round /></svg></span>";

fn tile(theme: &str, label: &str, icon: &Path) -> String {
    let src = format!("file://{}", icon.display());
    let img = |size: u32| {
        format!("<span class=icon style=\"width:{size}px;height:{size}px;background-image:url('{src}')\"></span>")
    };
    format!(
        "<div class=\"tile {theme}\"><span class=icon style=\"width:40px;height:40px;background-image:url('{src}')\">{CHECK}</span>\
         {}{}<span class=name>{label}<br><small>{theme}: 40 px installed, 40 px, 24 px</small></span></div>",
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
    let packages = [("Exactly-once Events", ""), ("Exactly-once Webhooks", "trigger/")];
    let mut body = String::new();
    for (label, tree) in packages {
        body.push_str(&tile("light", label, &path(&format!("{tree}_assets/icon.svg"))));
        body.push_str(&tile("dark", label, &path(&format!("{tree}_assets/icon-dark.svg"))));
    }
    let (dir, _guard) = out_dir();
    let shot = shoot(&dir, "dify-icons", &page(TILE_STYLE, &body, ""), DRAWER_WIDTH);
    assert_eq!(shot.width, DRAWER_WIDTH);
    assert!((300..800).contains(&shot.height), "four tiles: {} px", shot.height);
    // No badge of our own in the corner where Dify draws its check: nothing green in the icons.
    for (_, tree) in packages {
        for icon in ["_assets/icon.svg", "_assets/icon-dark.svg"] {
            let svg = std::fs::read_to_string(path(&format!("{tree}{icon}"))).unwrap().to_lowercase();
            for green in ["#16a34a", "#22c55e", "#17b26a", "green"] {
                assert!(!svg.contains(green), "{tree}{icon} has {green}");
            }
        }
    }
}

#[test]
fn docs_keep_every_screenshot_and_no_other() {
    let mut kept: Vec<String> = std::fs::read_dir(path("docs/screenshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    let taken: Vec<String> = SHOTS.iter().map(|name| format!("{name}.png")).collect();
    assert_eq!(kept, taken, "run scripts/screenshots.sh");
}
