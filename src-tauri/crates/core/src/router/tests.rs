//! The router's table: sensitive kinds, benign look-alikes, long and short
//! input at the threshold, tools and web, forced targets, the privacy
//! override and swap at the needed context; then the property that nothing
//! sensitive reaches the cloud without the override.

use super::sensitive::{prc_id_valid, scan, SensitiveKind};
use super::*;
use crate::chat::Role;

const LOCAL: &str = "qwen2.5-14b";
const SMALL: &str = "qwen2.5-7b";
const CLOUD: &str = "openai";

/// Tests count whitespace-separated words: exact, and easy to reason about.
fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// `n` words of filler, then `tail`.
fn long(n: usize, tail: &str) -> String {
    let mut s = "lorem ".repeat(n);
    s.push_str(tail);
    s
}

#[derive(Debug, Clone, Copy)]
enum Fit {
    /// The local model fits at any context.
    Fits,
    /// It swaps above this many tokens of context; no smaller model.
    SwapsAbove(u64),
    /// It always swaps; a smaller model fits.
    SwapsSmallerFits,
    /// It cannot fit at all; neither can the smaller one.
    NothingFits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Local,
    Small,
    Cloud,
}

#[derive(Debug)]
struct Case {
    name: &'static str,
    text: String,
    tools: bool,
    web: bool,
    force: Option<Force>,
    allow: bool,
    fit: Fit,
    expect: Expect,
    /// Reason codes that must be among the decision's.
    codes: &'static [&'static str],
}

fn case(name: &'static str, text: impl Into<String>, expect: Expect, codes: &'static [&'static str]) -> Case {
    Case { name, text: text.into(), tools: false, web: false, force: None, allow: false, fit: Fit::Fits, expect, codes }
}

/// A sensitive sample: stays local, with its kind's code.
fn sens(name: &'static str, text: &str, code: &'static [&'static str]) -> Case {
    case(name, text, Expect::Local, code)
}

/// A benign look-alike: sent with `needs_web`, so it reaches the cloud only
/// if no detector fired.
fn benign(name: &'static str, text: &str) -> Case {
    Case { web: true, ..case(name, text, Expect::Cloud, &["NEEDS_WEB"]) }
}

fn cases() -> Vec<Case> {
    use Expect::{Cloud, Local, Small};
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7Vx1\n-----END RSA PRIVATE KEY-----";
    vec![
        // Mainland-China mobile numbers.
        sens("cn mobile in Chinese prose", "我的手机号是13812345678，请帮我写一封邮件", &["SENSITIVE_CN_MOBILE"]),
        sens("cn mobile with +86 and spaces", "reach me on +86 138 1234 5678", &["SENSITIVE_CN_MOBILE"]),
        sens("cn mobile with hyphens", "call 139-1234-5678 tomorrow", &["SENSITIVE_CN_MOBILE"]),
        sens("cn mobile +86 packed", "+8615912345678", &["SENSITIVE_CN_MOBILE"]),
        sens("cn mobile 0086", "0086 186 0000 1111 is my number", &["SENSITIVE_CN_MOBILE"]),
        sens("cn mobile after a year", "in 2024 13812345678 was my number", &["SENSITIVE_CN_MOBILE"]),
        // Other phone numbers.
        sens("us phone with parentheses", "Call (415) 555-2671 after 5", &["SENSITIVE_PHONE"]),
        sens("us phone with hyphens", "my cell is 415-555-2671", &["SENSITIVE_PHONE"]),
        sens("us phone with dots and 1", "1.415.555.2671", &["SENSITIVE_PHONE"]),
        sens("uk phone international", "office: +44 20 7946 0958", &["SENSITIVE_PHONE"]),
        sens("us phone international", "+1 415 555 2671", &["SENSITIVE_PHONE"]),
        sens("bare digits after 'phone'", "phone 0301234567", &["SENSITIVE_PHONE"]),
        sens("bare digits after 电话", "电话：02087654321", &["SENSITIVE_PHONE"]),
        // PRC resident ID numbers (checksum-valid).
        sens("prc id with X", "身份证 11010519491231002X 请核对", &["SENSITIVE_PRC_ID"]),
        sens("prc id with lowercase x", "id 11010519491231002x", &["SENSITIVE_PRC_ID"]),
        sens("prc id all digits", "ID: 310115198502150017.", &["SENSITIVE_PRC_ID"]),
        sens("prc id leap day", "510107200002290045", &["SENSITIVE_PRC_ID"]),
        // Email addresses.
        sens("email", "write to j.doe@example.com please", &["SENSITIVE_EMAIL"]),
        sens("email with plus and subdomain", "张三 zhang.san+work@mail.company.co.uk", &["SENSITIVE_EMAIL"]),
        // Private IP addresses.
        sens("ipv4 192.168", "the printer is at 192.168.1.20", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv4 10/8 with port", "ssh to 10.0.0.5:2222", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv4 172.16/12", "gateway 172.16.4.2", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv4 loopback", "curl 127.0.0.1/health", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv4 link-local", "metadata at 169.254.169.254", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv6 link-local", "iface fe80::1ff:fe23:4567:890a", &["SENSITIVE_PRIVATE_IP"]),
        sens("ipv6 unique local", "[fd12:3456:789a::1]:8080", &["SENSITIVE_PRIVATE_IP"]),
        // Intranet hosts and paths.
        sens("corp host", "deploy to build01.corp tonight", &["SENSITIVE_INTRANET_HOST"]),
        sens("internal host", "postgres://db.prod.internal:5432", &["SENSITIVE_INTRANET_HOST"]),
        sens("lan host", "my NAS is nas.lan", &["SENSITIVE_INTRANET_HOST"]),
        sens("dotless url host", "see http://wiki/Onboarding", &["SENSITIVE_INTRANET_HOST"]),
        sens("unc path", r"open \\fileserver\finance\q3.xlsx", &["SENSITIVE_INTRANET_PATH"]),
        sens("smb url", "smb://nas01/photos", &["SENSITIVE_INTRANET_PATH"]),
        // Home-folder paths.
        sens("macos home", "read /Users/alice/Documents/report.pdf", &["SENSITIVE_HOME_PATH"]),
        sens("linux home", "cat /home/bob/.ssh/config", &["SENSITIVE_HOME_PATH"]),
        sens("tilde path", "edit ~/projects/plan.md", &["SENSITIVE_HOME_PATH"]),
        sens("windows home", r"C:\Users\Chen\Desktop\salary.xlsx", &["SENSITIVE_HOME_PATH"]),
        // Secrets.
        sens("openai key", "key sk-proj-a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", &["SENSITIVE_SECRET"]),
        sens("github token", "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ", &["SENSITIVE_SECRET"]),
        sens("aws key id", "AKIAIOSFODNN7EXAMPLE is in the log", &["SENSITIVE_SECRET"]),
        sens("slack bot token", "xoxb-1234567890-abcdefghijklm", &["SENSITIVE_SECRET"]),
        sens("pem private key", pem, &["SENSITIVE_SECRET"]),
        sens("api_key assignment", "api_key=9f8e7d6c5b4a3210", &["SENSITIVE_SECRET"]),
        sens("env password", "DB_PASSWORD: hunter2!", &["SENSITIVE_SECRET"]),
        sens("json secret", r#"{"client_secret": "s3cr3t-Value-99"}"#, &["SENSITIVE_SECRET"]),
        sens("random token near 'token'", "my token is Zx8kQ2mP9vL4nR7tY1wB6cJ3", &["SENSITIVE_SECRET"]),
        sens("bearer header", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc123def456", &["SENSITIVE_SECRET"]),
        // Benign look-alikes: nothing fires, so web search goes to the cloud.
        benign("order number after #", "Order #13812345678 shipped, where is it?"),
        benign("long order number", "order number 2024112900123456 status"),
        benign("millisecond timestamp", "timestamp 1732867200000 in UTC"),
        benign("date and time", "at 2024-11-29 12:30:45 UTC the job ran"),
        benign("version strings", "upgrade from v1.13.2 to version 3.11.4"),
        benign("amounts", "it cost $1,234.56 or ¥13812345678 in total"),
        benign("prc id with a bad checksum", "110105194912310021"),
        benign("prc id with a bad month", "110105194913310025"),
        benign("public ips", "dns 8.8.8.8 and 203.0.113.7"),
        benign("private ranges in cidr notation", "RFC 1918 reserves 10.0.0.0/8; ULAs are fc00::/7"),
        benign("mentions and retina names", "ping @channel about icon@2x.png"),
        benign("ssh remote", "git clone git@github.com:org/repo.git"),
        benign("intranet words", "the corporate lan party was internal"),
        benign("key placeholders", "use sk-learn, not sk-xxxxxxxxxxxxxxxxxxxxxxxx"),
        benign("key from the environment", "api_key = os.environ['OPENAI_API_KEY']"),
        benign("token count settings", "max_tokens=256 and token: str"),
        benign("system paths", "/usr/local/bin, /etc/hosts and /api/v1/Users/42"),
        benign("git sha", "commit 3f9a2c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39 broke it"),
        benign("isbn", "ISBN 978-3-16-148410-0"),
        benign("public urls", "https://example.com/docs and http://localhost:3000"),
        benign("home placeholders", "/home/<you>/.config and /Users/Shared/x"),
        benign("code attribute", "self.local_cache = token_count"),
        // Long and short input at the threshold (8192 words here).
        case("exactly the threshold stays local", long(8192, ""), Local, &["SHORT_INPUT"]),
        case("one over the threshold goes to the cloud", long(8193, ""), Cloud, &["LONG_INPUT"]),
        case(
            "long but sensitive stays local",
            long(9000, "mail a@b.co"),
            Local,
            &["LONG_INPUT", "STAYS_LOCAL_SENSITIVE"],
        ),
        case("short stays local", "What is a monad?", Local, &["SHORT_INPUT"]),
        // Tools and web.
        Case { tools: true, ..case("tools go to the cloud", "book a table", Cloud, &["NEEDS_TOOLS"]) },
        Case { web: true, ..case("web goes to the cloud", "news today", Cloud, &["NEEDS_WEB"]) },
        Case {
            tools: true,
            web: true,
            ..case(
                "tools with an email stay local",
                "mail bob@corp.com",
                Local,
                &["NEEDS_TOOLS", "STAYS_LOCAL_SENSITIVE"],
            )
        },
        // Forced targets and the privacy override.
        Case {
            force: Some(Force::Local),
            ..case("forced local on long input", long(9000, ""), Local, &["FORCED_LOCAL"])
        },
        Case { force: Some(Force::Cloud), ..case("forced cloud", "hi", Cloud, &["FORCED_CLOUD"]) },
        Case {
            force: Some(Force::Cloud),
            ..case(
                "forced cloud refused for a secret",
                "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ",
                Local,
                &["CLOUD_REFUSED_SENSITIVE", "SENSITIVE_SECRET"],
            )
        },
        Case {
            force: Some(Force::Cloud),
            allow: true,
            ..case(
                "forced cloud with the override",
                "ghp_1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ",
                Cloud,
                &["FORCED_CLOUD", "PRIVACY_OVERRIDDEN"],
            )
        },
        Case {
            tools: true,
            allow: true,
            ..case(
                "override lets tools reach the cloud",
                "mail bob@corp.com",
                Cloud,
                &["PRIVACY_OVERRIDDEN", "NEEDS_TOOLS"],
            )
        },
        Case {
            allow: true,
            ..case("override alone does not force the cloud", "mail bob@corp.com", Local, &["SHORT_INPUT"])
        },
        // Swap at the needed context.
        Case {
            fit: Fit::SwapsSmallerFits,
            ..case("swap picks a smaller model", "hi", Small, &["LOCAL_WOULD_SWAP", "SMALLER_LOCAL_MODEL"])
        },
        Case {
            fit: Fit::SwapsAbove(2000),
            ..case("swap goes to the cloud", long(1500, ""), Cloud, &["LOCAL_WOULD_SWAP"])
        },
        Case {
            fit: Fit::SwapsAbove(2000),
            ..case("fits below the swap point", long(900, ""), Local, &["SHORT_INPUT"])
        },
        Case {
            fit: Fit::NothingFits,
            ..case(
                "swap with sensitive content stays local",
                "ssh 10.1.2.3",
                Local,
                &["LOCAL_WOULD_SWAP", "SENSITIVE_PRIVATE_IP"],
            )
        },
        Case {
            fit: Fit::SwapsSmallerFits,
            ..case(
                "swap with sensitive content picks the smaller model",
                "ssh 10.1.2.3",
                Small,
                &["SMALLER_LOCAL_MODEL"],
            )
        },
        Case {
            force: Some(Force::Local),
            fit: Fit::NothingFits,
            ..case("forced local warns about the swap", "hi", Local, &["FORCED_LOCAL", "LOCAL_WOULD_SWAP"])
        },
    ]
}

type FitFn = dyn Fn(u64) -> Verdict;

fn swap(by: u64) -> Verdict {
    Verdict::WouldSwap { by_bytes: by }
}

fn run(c: &Case, cloud: Option<&str>) -> Result<Decision, RouteError> {
    run_with_threshold(c, cloud, DEFAULT_LOCAL_THRESHOLD_TOKENS)
}

fn run_with_threshold(c: &Case, cloud: Option<&str>, threshold: usize) -> Result<Decision, RouteError> {
    let fits = |_: u64| Verdict::Fits;
    let always_swaps = |_: u64| swap(1);
    let cannot = |_: u64| Verdict::CannotFit { by_bytes: 1 };
    let above = |limit: u64| move |ctx: u64| if ctx > limit { swap(ctx - limit) } else { Verdict::Fits };
    let limit = match c.fit {
        Fit::SwapsAbove(n) => n,
        _ => u64::MAX,
    };
    let swaps_above = above(limit);
    let (main, smaller): (&FitFn, Option<&FitFn>) = match c.fit {
        Fit::Fits => (&fits, None),
        Fit::SwapsAbove(_) => (&swaps_above, None),
        Fit::SwapsSmallerFits => (&always_swaps, Some(&fits)),
        Fit::NothingFits => (&cannot, Some(&cannot)),
    };
    let mut ctx = RouteContext::new(&words);
    ctx.local = Some(LocalModel { id: LOCAL.into(), fit_at: main });
    ctx.smaller_local = smaller.map(|f| LocalModel { id: SMALL.into(), fit_at: f }).into_iter().collect();
    ctx.cloud = cloud.map(str::to_owned);
    ctx.local_threshold_tokens = threshold;
    let request = RouteRequest {
        text: &c.text,
        history: &[],
        needs_tools: c.tools,
        needs_web: c.web,
        force: c.force,
        allow_sensitive: c.allow,
        tool_results: &[],
    };
    route(&request, &ctx)
}

#[test]
fn the_table_routes_every_case_as_expected() {
    let cases = cases();
    assert!(cases.len() >= 60, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let d = match run(c, Some(CLOUD)) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{}: error {e}", c.name));
                continue;
            }
        };
        let want = match c.expect {
            Expect::Local => Target::Local { model: LOCAL.into() },
            Expect::Small => Target::Local { model: SMALL.into() },
            Expect::Cloud => Target::Cloud { provider: CLOUD.into() },
        };
        let codes = d.codes();
        if d.target != want || !c.codes.iter().all(|code| codes.contains(code)) {
            failures.push(format!("{}: got {:?} {codes:?}, want {want:?} with {:?}", c.name, d.target, c.codes));
        }
        // A look-alike that fired would be a false positive even if routed right.
        if c.codes.iter().all(|code| !code.starts_with("SENSITIVE_"))
            && !c.allow
            && d.is_sensitive()
            && c.expect == Expect::Cloud
        {
            failures.push(format!("{}: unexpected sensitive finding {codes:?}", c.name));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

#[test]
fn benign_look_alikes_have_no_findings() {
    let mut ran = 0;
    for c in cases().iter().filter(|c| c.expect == Expect::Cloud && c.web && !c.allow) {
        assert!(scan(&c.text).is_empty(), "{}: {:?}", c.name, scan(&c.text));
        ran += 1;
    }
    assert!(ran >= 20, "only {ran} look-alikes were scanned");
}

/// Every sensitive sample, under every combination of tools, web, long
/// input, forced targets, fit and cloud availability: without the override
/// it never reaches the cloud; with it, the cloud is allowed but the privacy
/// reasons stay. (A 64-word threshold here keeps "long" cheap to scan.)
#[test]
fn no_sensitive_case_reaches_the_cloud_without_the_override() {
    let samples: Vec<Case> =
        cases().into_iter().filter(|c| c.codes.iter().any(|code| code.starts_with("SENSITIVE_"))).collect();
    assert!(samples.len() >= 40, "only {} sensitive samples", samples.len());
    let mut checked = 0;
    for s in &samples {
        for bits in 0..16u32 {
            for force in [None, Some(Force::Local), Some(Force::Cloud)] {
                for fit in [Fit::Fits, Fit::SwapsSmallerFits, Fit::NothingFits] {
                    let text = if bits & 4 != 0 { long(80, &s.text) } else { s.text.clone() };
                    let c = Case {
                        name: s.name,
                        text,
                        tools: bits & 1 != 0,
                        web: bits & 2 != 0,
                        force,
                        allow: false,
                        fit,
                        expect: Expect::Local,
                        codes: &[],
                    };
                    let cloud = if bits & 8 != 0 { None } else { Some(CLOUD) };
                    let d = run_with_threshold(&c, cloud, 64).map_err(|e| format!("{}: {e}", s.name)).unwrap();
                    assert_eq!(
                        d.codes().contains(&"LONG_INPUT"),
                        bits & 4 != 0 && force != Some(Force::Local),
                        "{}",
                        s.name
                    );
                    assert!(!d.is_cloud(), "{} reached the cloud: {:?}", s.name, d.codes());
                    assert!(d.is_sensitive() && !d.privacy_overridden(), "{}", s.name);
                    match run_with_threshold(&Case { allow: true, ..c }, cloud, 64) {
                        Ok(allowed) => assert!(allowed.is_sensitive() && allowed.privacy_overridden(), "{}", s.name),
                        // Forcing the cloud with the override, and no cloud set up.
                        Err(e) => assert!(cloud.is_none() && e == RouteError::NoCloudProvider, "{}: {e}", s.name),
                    }
                    checked += 2;
                }
            }
        }
    }
    // Each sample under 16 x 3 x 3 combinations, routed without and with the override.
    assert_eq!(checked, samples.len() * 16 * 3 * 3 * 2);
}

/// The reasons name what was found without repeating it.
#[test]
fn explanations_mask_what_they_found() {
    let secrets = [
        ("13812345678", "138****5678"),
        ("j.doe@example.com", "j***@example.com"),
        ("11010519491231002X", "1101************2X"),
        ("sk-proj-a1B2c3D4e5F6g7H8i9J0kLmNoPqRsT", "sk-…(38 chars)"),
        ("415-555-2671", "415*****71"),
    ];
    for (secret, masked) in secrets {
        let tokens = words;
        let ctx = RouteContext {
            local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
            ..RouteContext::new(&tokens)
        };
        let text = format!("here: {secret} ok");
        let d = route(&RouteRequest::new(&text), &ctx).unwrap();
        let json = serde_json::to_string(&d).unwrap();
        assert!(!json.contains(secret), "{json}");
        assert!(json.contains(masked), "{masked} not in {json}");
        let explained: Vec<String> = d.reasons.iter().map(Reason::explain).collect();
        assert!(explained.iter().any(|e| e.contains(masked)), "{explained:?}");
    }
}

#[test]
fn a_sensitive_earlier_message_keeps_the_conversation_local() {
    let history = [Message::new(Role::User, "my server is 192.168.0.10"), Message::new(Role::Assistant, "Noted.")];
    let ctx = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        cloud: Some(CLOUD.into()),
        ..RouteContext::new(&words)
    };
    let request = RouteRequest { history: &history, needs_web: true, ..RouteRequest::new("any news?") };
    let d = route(&request, &ctx).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.reasons.iter().any(|r| matches!(r, Reason::Sensitive { earlier_message: Some(0), .. })));
    assert!(d.reasons.iter().any(|r| r.explain().starts_with("Earlier message 1 contains a private IP address")));
    // The history's tokens count towards the input.
    assert_eq!(d.input_tokens, 4 + 1 + 2);
}

#[test]
fn what_cannot_be_routed_is_a_clear_error() {
    let no_models = RouteContext::new(&words);
    let err = route(&RouteRequest::new("mail a@b.co"), &no_models).err();
    assert!(matches!(err, Some(RouteError::NoLocalModel { .. })), "{err:?}");
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("sensitive content") && msg.contains("allow sensitive content for this message"), "{msg}");

    let forced = RouteRequest { force: Some(Force::Cloud), ..RouteRequest::new("hi") };
    assert_eq!(route(&forced, &no_models), Err(RouteError::NoCloudProvider));

    // Wanting the cloud without a provider falls back to the local model, saying so.
    let local_only = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        ..RouteContext::new(&words)
    };
    let d = route(&RouteRequest { needs_web: true, ..RouteRequest::new("news") }, &local_only).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.codes().contains(&"NO_CLOUD_PROVIDER"));
}

#[test]
fn the_needed_context_is_input_plus_reply_reserve() {
    let seen = std::cell::Cell::new(0);
    let fit = |ctx: u64| {
        seen.set(ctx);
        Verdict::Fits
    };
    let ctx = RouteContext { local: Some(LocalModel { id: LOCAL.into(), fit_at: &fit }), ..RouteContext::new(&words) };
    let d = route(&RouteRequest::new("one two three"), &ctx).unwrap();
    assert_eq!(d.needed_context, 3 + DEFAULT_REPLY_RESERVE_TOKENS as u64);
    assert_eq!(seen.get(), d.needed_context);
}

#[test]
fn the_approximate_counter_errs_high_and_says_so() {
    assert_eq!(ApproxTokens.count(""), 0);
    assert_eq!(ApproxTokens.count("abcd"), 1);
    assert_eq!(ApproxTokens.count("abcde"), 2);
    assert_eq!(ApproxTokens.count("你好"), 2);
    assert!(!ApproxTokens.exact());
    assert!(words.exact());
    let ctx = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        ..RouteContext::new(&ApproxTokens)
    };
    let d = route(&RouteRequest::new("hello there"), &ctx).unwrap();
    assert!(!d.tokens_exact);
    assert!(d.reasons.iter().any(|r| r.explain().contains("about 3 tokens")), "{:?}", d.reasons);
}

#[test]
fn decisions_serialize_for_the_ui() {
    let ctx = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        cloud: Some(CLOUD.into()),
        ..RouteContext::new(&words)
    };
    let d = route(&RouteRequest { needs_tools: true, ..RouteRequest::new("book it") }, &ctx).unwrap();
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["target"], serde_json::json!({ "kind": "cloud", "provider": "openai" }));
    assert_eq!(v["reasons"][0]["code"], "NEEDS_TOOLS");
    assert_eq!(v["reasons"][0]["message"], "The request needs tools, which the cloud model provides.");
    assert_eq!(v["inputTokens"], 2);
    assert_eq!(v["tokensExact"], true);
    let f: Force = serde_json::from_str("\"cloud\"").unwrap();
    assert_eq!(f, Force::Cloud);
}

#[test]
fn prc_ids_need_region_date_and_checksum() {
    assert!(prc_id_valid(b"11010519491231002X"));
    assert!(prc_id_valid(b"44030419900307123X"));
    assert!(!prc_id_valid(b"110105194912310021"), "checksum");
    assert!(!prc_id_valid(b"99010519491231002X"), "region");
    assert!(!prc_id_valid(b"510107190102290045"), "1901 had no 29 February");
    assert!(!prc_id_valid(b"1101051949123100"), "length");
}

#[test]
fn findings_carry_kind_span_and_mask() {
    let text = "mail ops@build01.corp or call +86 138 1234 5678";
    let found = scan(text);
    let kinds: Vec<SensitiveKind> = found.iter().map(|f| f.kind).collect();
    // The host inside the email is not reported twice.
    assert_eq!(kinds, [SensitiveKind::Email, SensitiveKind::CnMobile]);
    assert_eq!(&text[found[0].start..found[0].end], "ops@build01.corp");
    assert_eq!(&text[found[1].start..found[1].end], "+86 138 1234 5678");
    assert_eq!(found[1].masked, "138****5678");
}

/// The scanners are linear: a long paste of numbers, words and symbols is
/// scanned quickly (in a debug build, too).
#[test]
fn scanning_large_inputs_stays_fast() {
    let mut text = "1 2 3 4 5 6 7 8 9 10 ".repeat(5_000);
    text.push_str(&"key=value a.b.c 10.0 x@y :: ~ \\\\ -----BEGIN ".repeat(2_000));
    text.push_str("call 415-555-2671");
    let started = std::time::Instant::now();
    let found = scan(&text);
    let took = started.elapsed();
    assert_eq!(found.iter().map(|f| f.kind).collect::<Vec<_>>(), [SensitiveKind::Phone]);
    assert!(took.as_secs_f64() < 5.0, "{} KB took {took:?}", text.len() / 1000);
}

/// Pastes built to be each detector's worst case (what used to make some
/// of them rescan the rest of the text per candidate: `pwd=` without
/// spaces took 3 s for 32 KiB). At 256 KiB each, a quadratic detector would
/// take minutes even in release; linear ones take well under a second here
/// in a debug build. `benches/scan.rs` measures the release figures.
#[test]
fn adversarial_pastes_scan_in_linear_time() {
    let fill = |unit: &str| unit.repeat((256 << 10) / unit.len());
    let units = [
        "pwd=",
        "pwd=<",
        "token=",
        "sk-",
        "1.2.3.4.",
        "1 2 3 4 ",
        "/home/a",
        "smb://",
        "smb:///",
        "~/",
        "-----BEGIN RSA PRIVATE KEY-----",
        "a.b@",
        "10.0.0.1 ",
        "build.corp ",
        "phone 12345678 ",
        "http://",
        "\\\\s\\",
        "bearer ",
        "x=\"pwd=\"",
    ];
    let started = std::time::Instant::now();
    for unit in units {
        let text = fill(unit);
        let one = std::time::Instant::now();
        let found = scan(&text);
        assert!(one.elapsed().as_secs_f64() < 10.0, "{unit:?}: {:?} for {} findings", one.elapsed(), found.len());
    }
    assert!(started.elapsed().as_secs_f64() < 30.0, "{:?}", started.elapsed());
}

#[test]
fn the_scan_cache_scans_each_text_once_and_never_confuses_two() {
    let cache = sensitive::ScanCache::default();
    let secret = "my id is 11010519491231002X";
    assert_eq!(cache.scan(secret).len(), 1);
    assert_eq!(cache.scan("hello").len(), 0);
    assert_eq!(cache.scans(), 2);
    for _ in 0..3 {
        assert_eq!(&*cache.scan(secret), scan(secret).as_slice());
    }
    assert_eq!(cache.scans(), 2, "unchanged texts are looked up, not scanned");
    // An edit is a new text.
    assert!(cache.scan("my id is 11010519491231002").is_empty());
    assert_eq!(cache.scans(), 3);
}

#[test]
fn sensitive_history_is_left_out_when_the_cloud_answers_and_only_the_override_sends_it() {
    let history = [
        Message::new(Role::User, "my server is 192.168.0.10"),
        Message::new(Role::Assistant, "Noted."),
        Message::new(Role::User, "and the weather?"),
        Message::new(Role::Assistant, "Sunny."),
    ];
    let with_local = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        cloud: Some(CLOUD.into()),
        ..RouteContext::new(&words)
    };
    // Forcing the cloud sends this harmless message, without the sensitive exchange.
    let forced = RouteRequest { history: &history, force: Some(Force::Cloud), ..RouteRequest::new("any news?") };
    let d = route(&forced, &with_local).unwrap();
    assert_eq!(d.target, Target::Cloud { provider: CLOUD.into() });
    assert!(d.reasons.contains(&Reason::HistoryWithheld { messages: vec![0, 1] }), "{:?}", d.reasons);
    let said = d.reasons.iter().map(Reason::explain).collect::<Vec<_>>().join(" ");
    assert!(said.contains("Earlier messages 1 and 2 stay on this Mac"), "{said}");
    assert!(!crate::cache_policy::cacheable(&d), "a request with sensitive history is never cached");

    // With the override for this message, nothing is left out.
    let allowed = RouteRequest { allow_sensitive: true, ..forced };
    let d = route(&allowed, &with_local).unwrap();
    assert!(d.is_cloud() && d.privacy_overridden() && !d.codes().contains(&"HISTORY_WITHHELD"), "{:?}", d.codes());

    // Forcing the cloud for a sensitive message is refused, whatever the history.
    let refused = RouteRequest { history: &history, force: Some(Force::Cloud), ..RouteRequest::new("pwd=hunter22") };
    let d = route(&refused, &with_local).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.codes().contains(&"CLOUD_REFUSED_SENSITIVE"));

    // No local model: the cloud answers a harmless message without the
    // sensitive exchange; a sensitive message has nowhere to go.
    let cloud_only = RouteContext { cloud: Some(CLOUD.into()), ..RouteContext::new(&words) };
    let d = route(&RouteRequest { history: &history, ..RouteRequest::new("any news?") }, &cloud_only).unwrap();
    assert!(d.is_cloud(), "{d:?}");
    assert!(d.codes().contains(&"NO_LOCAL_MODEL") && d.codes().contains(&"HISTORY_WITHHELD"), "{:?}", d.codes());
    let err = route(&RouteRequest { history: &history, ..RouteRequest::new("call 13812345678") }, &cloud_only).err();
    assert!(matches!(err, Some(RouteError::NoLocalModel { .. })), "{err:?}");
    let err = route(&forced, &RouteContext::new(&words)).err();
    assert_eq!(err, Some(RouteError::NoCloudProvider));
}

#[test]
fn a_scan_cache_gives_the_same_decisions_and_scans_the_history_once() {
    let history: Vec<Message> =
        (0..50).map(|i| Message::new(Role::User, format!("turn {i}: ssh to 10.0.{i}.1 and mail a{i}@b.co"))).collect();
    let cache = sensitive::ScanCache::default();
    let cached = RouteContext { scans: Some(&cache), cloud: Some(CLOUD.into()), ..RouteContext::new(&words) };
    let fresh = RouteContext { cloud: Some(CLOUD.into()), ..RouteContext::new(&words) };
    for draft in ["a", "an", "and", "and t", "and then?"] {
        let request = RouteRequest { history: &history, force: Some(Force::Cloud), ..RouteRequest::new(draft) };
        assert_eq!(route(&request, &cached), route(&request, &fresh));
    }
    // 50 history messages once, and each of the five drafts.
    assert_eq!(cache.scans(), 55);
}

#[test]
fn each_example_is_found_as_its_kind_on_its_own_and_in_a_sentence() {
    for (kind, example) in sensitive::EXAMPLES {
        let alone: Vec<SensitiveKind> = scan(example).iter().map(|f| f.kind).collect();
        assert_eq!(alone, [kind], "{example}");
        let said = format!("please note {example} for later");
        assert!(scan(&said).iter().any(|f| f.kind == kind && !f.masked.contains(example)), "{said}");
    }
}

#[test]
fn a_sensitive_or_private_tool_result_keeps_the_chat_local_and_forcing_the_cloud_is_refused() {
    let ctx = RouteContext {
        local: Some(LocalModel { id: LOCAL.into(), fit_at: &|_| Verdict::Fits }),
        cloud: Some(CLOUD.into()),
        ..RouteContext::new(&words)
    };
    let secret = [ToolResult {
        tool: "read_config".into(),
        text: "deploy key sk-proj-4fZq8T2mLw9RbX7yKc3VnE6pHs1Ud0Ja".into(),
        private: false,
    }];
    let request = RouteRequest { tool_results: &secret, needs_web: true, ..RouteRequest::new("any news?") };
    let d = route(&request, &ctx).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.is_sensitive() && d.codes().contains(&"TOOL_RESULT_SENSITIVE"), "{:?}", d.codes());
    let said: Vec<String> = d.reasons.iter().map(Reason::explain).collect();
    assert!(said.iter().any(|s| s.starts_with("Kept local: a tool result holds a secret")), "{said:?}");
    assert!(!said.iter().any(|s| s.contains("4fZq8T2mLw9RbX7yKc3VnE6pHs1Ud0Ja")), "{said:?}");
    // Forcing the cloud does not carry it out.
    let forced = RouteRequest { force: Some(Force::Cloud), ..request };
    let d = route(&forced, &ctx).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.codes().contains(&"CLOUD_REFUSED_SENSITIVE"));
    // Without a local model it is refused, saying why.
    let cloud_only = RouteContext { cloud: Some(CLOUD.into()), ..RouteContext::new(&words) };
    let e = route(&request, &cloud_only).unwrap_err().to_string();
    assert!(e.contains("a tool result in this chat holds sensitive content"), "{e}");
    // A private tool's result counts whatever the scanner finds; a plain one does not.
    let private = [ToolResult { tool: "read_file".into(), text: "hello".into(), private: true }];
    let d =
        route(&RouteRequest { tool_results: &private, needs_web: true, ..RouteRequest::new("news?") }, &ctx).unwrap();
    assert_eq!(d.target, Target::Local { model: LOCAL.into() });
    assert!(d.reasons.iter().any(|r| r.explain().contains("read_file's results are set to private")));
    let plain = [ToolResult { tool: "now".into(), text: "10:42".into(), private: false }];
    let d = route(&RouteRequest { tool_results: &plain, needs_web: true, ..RouteRequest::new("news?") }, &ctx).unwrap();
    assert!(d.is_cloud());
}
