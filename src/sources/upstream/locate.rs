//! Where each key of `switchboard.json` was written, so that an error in the `upstreams`
//! section can name its line and column (serde_json's `Value` forgets positions).
//!
//! A forward-only scanner over text that has already parsed as JSON: it records the position
//! of every object key and of its value, by path (`["upstreams", "teams", "comand"]`).

use std::collections::HashMap;

/// A 1-based line and column (columns count characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pos {
    /// Line.
    pub line: usize,
    /// Column.
    pub column: usize,
}

/// Key and value positions by path.
#[derive(Debug, Default)]
pub struct Locator {
    keys: HashMap<Vec<String>, (Pos, Pos)>,
}

impl Locator {
    /// Indexes `text`, which must be valid JSON (anything else yields an empty index).
    pub fn new(text: &str) -> Locator {
        let mut s = Scanner {
            chars: text.chars().collect(),
            i: 0,
            pos: Pos { line: 1, column: 1 },
            keys: HashMap::new(),
        };
        let mut path = Vec::new();
        s.ws();
        s.value(&mut path);
        Locator { keys: s.keys }
    }

    /// Where the key at `path` was written.
    pub fn key(&self, path: &[&str]) -> Option<Pos> {
        self.lookup(path).map(|p| p.0)
    }

    /// Where the value of the key at `path` starts.
    pub fn value(&self, path: &[&str]) -> Option<Pos> {
        self.lookup(path).map(|p| p.1)
    }

    fn lookup(&self, path: &[&str]) -> Option<(Pos, Pos)> {
        let owned: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        self.keys.get(&owned).copied()
    }
}

struct Scanner {
    chars: Vec<char>,
    i: usize,
    pos: Pos,
    keys: HashMap<Vec<String>, (Pos, Pos)>,
}

impl Scanner {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.i += 1;
            if c == '\n' {
                self.pos.line += 1;
                self.pos.column = 1;
            } else {
                self.pos.column += 1;
            }
        }
    }

    fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    /// A string starting at the opening quote; returns it decoded (escapes kept simple: the
    /// keys we look up are plain).
    fn string(&mut self) -> String {
        let mut out = String::new();
        self.bump();
        while let Some(c) = self.peek() {
            self.bump();
            match c {
                '"' => break,
                '\\' => {
                    if let Some(e) = self.peek() {
                        self.bump();
                        out.push(match e {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                    }
                }
                c => out.push(c),
            }
        }
        out
    }

    fn value(&mut self, path: &mut Vec<String>) {
        match self.peek() {
            Some('{') => {
                self.bump();
                loop {
                    self.ws();
                    match self.peek() {
                        Some('"') => {}
                        Some('}') | None => {
                            self.bump();
                            return;
                        }
                        Some(_) => {
                            self.bump();
                            continue;
                        }
                    }
                    let at = self.pos;
                    let key = self.string();
                    self.ws();
                    if self.peek() == Some(':') {
                        self.bump();
                    }
                    self.ws();
                    path.push(key);
                    self.keys.insert(path.clone(), (at, self.pos));
                    self.value(path);
                    path.pop();
                    self.ws();
                    if self.peek() == Some(',') {
                        self.bump();
                    }
                }
            }
            Some('[') => {
                self.bump();
                let mut index = 0usize;
                loop {
                    self.ws();
                    match self.peek() {
                        Some(']') | None => {
                            self.bump();
                            return;
                        }
                        Some(',') => self.bump(),
                        Some(_) => {
                            // An element is addressed by its index (`["schedules", "0"]`).
                            path.push(index.to_string());
                            self.keys.insert(path.clone(), (self.pos, self.pos));
                            self.value(path);
                            path.pop();
                            index += 1;
                        }
                    }
                }
            }
            Some('"') => {
                self.string();
            }
            Some(_) => {
                while self
                    .peek()
                    .is_some_and(|c| !matches!(c, ',' | '}' | ']') && !c.is_whitespace())
                {
                    self.bump();
                }
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_located_by_path() {
        let text = "{\n  \"upstreams\": {\n    \"teams\": {\"comand\": \"x\",\n      \"args\": [\"a\", {\"b\": 1}]}\n  }\n}";
        let loc = Locator::new(text);
        assert_eq!(loc.key(&["upstreams"]), Some(Pos { line: 2, column: 3 }));
        assert_eq!(
            loc.key(&["upstreams", "teams", "comand"]),
            Some(Pos {
                line: 3,
                column: 15
            })
        );
        assert_eq!(
            loc.value(&["upstreams", "teams", "args"]),
            Some(Pos {
                line: 4,
                column: 15
            })
        );
        assert_eq!(loc.key(&["upstreams", "teams", "b"]), None);
        assert_eq!(
            loc.key(&["upstreams", "teams", "args", "1", "b"]),
            Some(Pos {
                line: 4,
                column: 22
            }),
            "array elements by index"
        );
        assert_eq!(
            loc.value(&["upstreams", "teams", "args", "1"]),
            Some(Pos {
                line: 4,
                column: 21
            })
        );
    }
}
