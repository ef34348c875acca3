//! A workload command given as one string (`--hp-command "python3 serve.py --batch 1"`) split
//! into a program and its arguments, without a shell: words are separated by blanks; '...'
//! keeps everything literally, "..." keeps blanks and takes `\"` and `\\` as escapes, and a
//! backslash outside quotes escapes the next character. No variables, globs or pipes: a
//! command that needs them runs `sh -c '...'` itself.

/// The words of `line`, or what is wrong with it.
pub fn split(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err(unterminated(line, '\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err(unterminated(line, '"')),
                        },
                        Some(c) => cur.push(c),
                        None => return Err(unterminated(line, '"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err(format!("{line:?} ends in a lone backslash")),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err("the command is empty: give a program and its arguments".into());
    }
    Ok(words)
}

fn unterminated(line: &str, q: char) -> String {
    format!("{line:?} has an unterminated {q} quote")
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn words_quotes_and_escapes() {
        assert_eq!(
            split("  python3 -u  hp.py ").unwrap(),
            ["python3", "-u", "hp.py"]
        );
        assert_eq!(
            split(r#"sh -c 'echo "a b"; exit 0' x"#).unwrap(),
            ["sh", "-c", r#"echo "a b"; exit 0"#, "x"]
        );
        assert_eq!(
            split(r#"a "b \"c\" \\ \d" e\ f ''"#).unwrap(),
            ["a", r#"b "c" \ \d"#, "e f", ""]
        );
        assert!(split("a 'b").unwrap_err().contains("unterminated ' quote"));
        assert!(
            split("a \"b")
                .unwrap_err()
                .contains("unterminated \" quote")
        );
        assert!(split("a \\").unwrap_err().contains("lone backslash"));
        assert!(split("   ").unwrap_err().contains("empty"));
    }
}
