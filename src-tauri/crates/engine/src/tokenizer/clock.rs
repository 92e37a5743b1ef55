//! `strftime_now(format)`, the function transformers gives chat templates
//! (Llama 3.x's tells the model today's date with it, and without it tells
//! the model that today is 26 Jul 2024). Python's strftime for the
//! specifiers templates use, on the UTC date: the engine has no time-zone
//! database, and the date is all templates print.

use std::time::{SystemTime, UNIX_EPOCH};

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// A moment as strftime's fields see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Moment {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    /// 0 = Monday
    weekday: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Moment {
    /// The UTC moment `secs` seconds after the Unix epoch.
    pub(crate) fn from_unix(secs: i64) -> Self {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        // 1970-01-01 was a Thursday (3 with Monday = 0).
        let weekday = (days + 3).rem_euclid(7) as u32;
        Self {
            year,
            month,
            day,
            weekday,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    pub(crate) fn now() -> Self {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Self::from_unix(i64::try_from(secs).unwrap_or(0))
    }

    /// `format` with Python's strftime specifiers filled in; an unknown one is an error naming it.
    pub(crate) fn format(&self, format: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let month = MONTHS[(self.month - 1) as usize];
            let weekday = DAYS[self.weekday as usize];
            match chars.next() {
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('-') if chars.clone().next() == Some('d') => {
                    chars.next();
                    out.push_str(&self.day.to_string());
                }
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('B') => out.push_str(month),
                Some('b') => out.push_str(&month[..3]),
                Some('A') => out.push_str(weekday),
                Some('a') => out.push_str(&weekday[..3]),
                Some('H') => out.push_str(&format!("{:02}", self.hour)),
                Some('M') => out.push_str(&format!("{:02}", self.minute)),
                Some('S') => out.push_str(&format!("{:02}", self.second)),
                Some('%') => out.push('%'),
                Some(other) => {
                    return Err(format!(
                        "strftime_now: %{other} is not supported (%d %-d %m %Y %y %B %b %A %a %H %M %S %%)"
                    ))
                }
                None => return Err("strftime_now: the format ends with a lone %".to_owned()),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_pythons() {
        // datetime.fromtimestamp(0, tz=utc) and a few known days.
        let epoch = Moment::from_unix(0);
        assert_eq!(epoch.format("%d %b %Y %A %H:%M:%S").as_deref(), Ok("01 Jan 1970 Thursday 00:00:00"));
        // 2024-07-26 (the date Llama 3.2's template falls back to) was a Friday.
        let m = Moment::from_unix(1_721_952_000);
        assert_eq!(m.format("%d %B %Y, %a").as_deref(), Ok("26 July 2024, Fri"));
        // 2000-02-29, a leap day; 2026-12-02 12:34:56.
        assert_eq!(Moment::from_unix(951_782_400).format("%Y-%m-%d %-d %y").as_deref(), Ok("2000-02-29 29 00"));
        assert_eq!(
            Moment::from_unix(1_796_214_896).format("%Y-%m-%d %H:%M:%S %%").as_deref(),
            Ok("2026-12-02 12:34:56 %")
        );
        assert!(m.format("%Q").is_err_and(|e| e.contains("%Q")));
        assert!(m.format("50%").is_err());
    }

    /// Llama 3.2's check, as its template writes it: with the function, today; never the fallback.
    #[test]
    fn a_template_that_asks_for_it_gets_todays_date() {
        let template = r#"{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}Today Date: {{ date_string }}"#;
        let before = Moment::now().format("%d %b %Y").expect("format");
        let out = crate::tokenizer::render_template(
            template,
            &[],
            crate::tokenizer::TemplateExtras::default(),
            false,
            None,
            None,
        )
        .expect("renders");
        let after = Moment::now().format("%d %b %Y").expect("format");
        assert!(out == format!("Today Date: {before}") || out == format!("Today Date: {after}"), "{out}");
    }
}
