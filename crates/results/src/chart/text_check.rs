//! The text of a chart, checked: every label drawn whole inside the canvas, and no two labels
//! over each other. A chart is drawn once more onto a backend that draws nothing but notes where
//! each text's ink falls, pixel by pixel, with the same embedded font and layout as the PNG, so
//! that what is checked is what a reader sees: a subtitle cut at both edges, a tick label under
//! a legend, two point labels on one another.
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;

use anyhow::Result;
use plotters::prelude::*;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind};

use super::{register_fonts, Chart, SIZE};

/// Where one text's ink fell: its pixels' bounds, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextInk {
    pub text: String,
    pub left: i32,
    pub top: i32,
    pub right: i32,
    pub bottom: i32,
}

impl TextInk {
    fn overlaps(&self, other: &TextInk) -> bool {
        self.left <= other.right
            && other.left <= self.right
            && self.top <= other.bottom
            && other.top <= self.bottom
    }

    fn inside(&self, (w, h): (u32, u32)) -> bool {
        self.left >= 0 && self.top >= 0 && self.right < w as i32 && self.bottom < h as i32
    }
}

impl fmt::Display for TextInk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at x {}..{}, y {}..{}", self.text, self.left, self.right, self.top, self.bottom)
    }
}

/// A backend that draws nothing and keeps where each text's ink would be (shared: the drawing
/// area owns the backend).
struct InkOnly {
    size: (u32, u32),
    texts: Rc<RefCell<Vec<TextInk>>>,
}

#[derive(Debug)]
struct Unreachable;

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("nothing fails on a backend that draws nothing")
    }
}

impl std::error::Error for Unreachable {}

type Drawn = Result<(), DrawingErrorKind<Unreachable>>;

impl DrawingBackend for InkOnly {
    type ErrorType = Unreachable;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }
    fn ensure_prepared(&mut self) -> Drawn {
        Ok(())
    }
    fn present(&mut self) -> Drawn {
        Ok(())
    }
    fn draw_pixel(&mut self, _: BackendCoord, _: BackendColor) -> Drawn {
        Ok(())
    }
    fn draw_line<S: BackendStyle>(&mut self, _: BackendCoord, _: BackendCoord, _: &S) -> Drawn {
        Ok(())
    }
    fn draw_rect<S: BackendStyle>(&mut self, _: BackendCoord, _: BackendCoord, _: &S, _: bool) -> Drawn {
        Ok(())
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(&mut self, _: I, _: &S) -> Drawn {
        Ok(())
    }
    fn draw_circle<S: BackendStyle>(&mut self, _: BackendCoord, _: u32, _: &S, _: bool) -> Drawn {
        Ok(())
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(&mut self, _: I, _: &S) -> Drawn {
        Ok(())
    }
    fn blit_bitmap(&mut self, _: BackendCoord, _: (u32, u32), _: &[u8]) -> Drawn {
        Ok(())
    }

    /// Lays the text out as plotters' own `draw_text` does for the bitmap (anchor, rotation),
    /// and keeps the bounds of the pixels it would colour, wherever they fall.
    fn draw_text<S: BackendTextStyle>(&mut self, text: &str, style: &S, pos: BackendCoord) -> Drawn {
        if style.color().alpha == 0.0 || text.trim().is_empty() {
            return Ok(());
        }
        let ((min_x, min_y), (max_x, max_y)) =
            style.layout_box(text).map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
        let (width, height) = (max_x - min_x, max_y - min_y);
        let dx = match style.anchor().h_pos {
            HPos::Left => 0,
            HPos::Right => -width,
            HPos::Center => -width / 2,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => 0,
            VPos::Center => -height / 2,
            VPos::Bottom => -height,
        };
        let transform = style.transform();
        let mut ink: Option<(i32, i32, i32, i32)> = None;
        style
            .draw(text, (0, 0), |x, y, colour| {
                if colour.alpha > 0.0 {
                    let (x, y) = transform.transform(x + dx - min_x, y + dy - min_y);
                    let (x, y) = (pos.0 + x, pos.1 + y);
                    ink = Some(match ink {
                        None => (x, y, x, y),
                        Some((l, t, r, b)) => (l.min(x), t.min(y), r.max(x), b.max(y)),
                    });
                }
                Ok::<(), DrawingErrorKind<Unreachable>>(())
            })
            .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))??;
        if let Some((left, top, right, bottom)) = ink {
            self.texts.borrow_mut().push(TextInk { text: text.to_string(), left, top, right, bottom });
        }
        Ok(())
    }
}

/// Every text `chart` draws, where its ink falls on the canvas the tool writes (1280 x 800).
pub fn text_ink(chart: &impl Chart) -> Result<Vec<TextInk>> {
    register_fonts()?;
    let texts = Rc::new(RefCell::new(Vec::new()));
    let root = InkOnly { size: SIZE, texts: texts.clone() }.into_drawing_area();
    chart.draw(&root)?;
    drop(root);
    Ok(texts.take())
}

/// What is wrong with `chart`'s text, a line each: a text whose ink leaves the canvas, and two
/// texts whose ink overlaps. None for a chart a person reads at a glance.
pub fn text_problems(chart: &impl Chart) -> Result<Vec<String>> {
    let texts = text_ink(chart)?;
    let mut problems = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        if !t.inside(SIZE) {
            problems.push(format!("cut at the edge of the {} x {} canvas: {t}", SIZE.0, SIZE.1));
        }
        for other in &texts[i + 1..] {
            if t.overlaps(other) {
                problems.push(format!("over one another: {t} and {other}"));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chart::style::label_style;
    use plotters::coord::Shift;

    /// Texts where a test puts them.
    struct Texts(Vec<(&'static str, (i32, i32))>);

    impl Chart for Texts {
        fn file_stem(&self) -> String {
            "texts".into()
        }
        fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
        where
            DB::ErrorType: 'static,
        {
            for &(text, at) in &self.0 {
                root.draw_text(text, &label_style(), at)?;
            }
            Ok(())
        }
    }

    #[test]
    fn text_apart_and_inside_passes_and_text_cut_or_overlapping_is_named() {
        let good = Texts(vec![("peak 1.9 GiB", (100, 100)), ("peak 2.0 GiB", (400, 100))]);
        assert_eq!(text_problems(&good).unwrap(), Vec::<String>::new());
        let ink = text_ink(&good).unwrap();
        assert_eq!(ink.len(), 2);
        assert!(
            ink[0].left >= 100 && ink[0].right > ink[0].left + 50 && (90..=115).contains(&ink[0].top),
            "{ink:?}"
        );

        let bad =
            Texts(vec![("peak 1.9 GiB", (100, 100)), ("peak 2.0 GiB", (150, 105)), ("cut", (1270, 10))]);
        let problems = text_problems(&bad).unwrap();
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems.iter().any(|p| p.starts_with("over one another: \"peak 1.9 GiB\"")),
            "{problems:#?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("cut at the edge") && p.contains("\"cut\"")),
            "{problems:#?}"
        );
    }
}
