//! "Did you mean": the nearest of the names a place accepts to one it does not, for a misspelt
//! key, table or choice. A guess is offered only when it is close (Jaro-Winkler similarity of
//! at least 0.8, as a typo or a changed letter case is): a far-off guess misleads more than the
//! list of names that follows it.
use strsim::jaro_winkler;

/// The candidate most like `got`, if one is close enough to be what was meant.
pub(super) fn nearest<'a>(got: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let got = got.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (jaro_winkler(&got, &c.to_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `"; did you mean `x`?"` after a sentence, or nothing. `quote` writes the name as the place
/// spells it (`hidden`, "adam", [training]).
pub(super) fn did_you_mean<'a>(
    got: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    quote: impl Fn(&str) -> String,
) -> String {
    nearest(got, candidates).map_or_else(String::new, |c| format!("did you mean {}? ", quote(c)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_name_and_a_stranger_finds_none() {
        let keys = ["kind", "hidden", "depth", "widths"];
        assert_eq!(nearest("hiden", keys), Some("hidden"));
        assert_eq!(nearest("widht", keys), Some("widths"));
        assert_eq!(nearest("Depth", keys), Some("depth"));
        assert_eq!(nearest("learning_rate", keys), None);
        assert_eq!(nearest("x", keys), None);
    }

    #[test]
    fn the_guess_reads_as_a_question_before_the_list() {
        let q = |c: &str| format!("`{c}`");
        assert_eq!(did_you_mean("hiden", ["hidden"], q), "did you mean `hidden`? ");
        assert_eq!(did_you_mean("zzz", ["hidden"], q), "");
    }
}
