//! JSON serialization of Python values: RFC 8785 canonical JSON and its SHA-256, and
//! compact JSON in document order. Values are walked directly (dict, list, str, int,
//! float, bool, None and their subclasses); anything else is refused with
//! `grid.errors.CanonicalJsonError`, whose message names the problem and where it is.
//!
//! An [`ObjectForms`] is an object written both ways ahead of time: a list element that is
//! one is copied in, with its index member set to its place in the list. An overlay's
//! candidates are kept so from one render to the next, and only the new ones are walked.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::fmt::{self, Write as _};
use std::ops::Range;

use grid_core::canonical::{
    sha256_hex, utf16_order, write_integer, write_safe_integer, write_string, FiniteNumber,
    NumberError, MAX_DEPTH,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::errors::CanonicalJsonError;

/// Which serialization is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// RFC 8785: members by UTF-16 code units, ECMAScript numbers, safe integers only.
    Canonical,
    /// Python's `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`: members in
    /// document order, floats as `repr` writes them, any integer.
    Compact,
}

/// What made a value unserializable.
enum Problem {
    Number(NumberError),
    /// An integer that does not even fit 64 bits.
    HugeInteger,
    LoneSurrogate,
    NonStringKey(String),
    Unsupported(String),
    TooDeep,
    /// A member the caller asked for is absent.
    Missing(String),
    /// Python raised writing an integer too large for 64 bits (`int.__repr__`).
    Python(String),
    /// An [`ObjectForms`] whose object already has the member that is to hold its index.
    IndexMemberTaken(String),
    /// An [`ObjectForms`] where no list gives it an index.
    FormsOutsideList,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Number(error) => write!(f, "{error}"),
            Problem::HugeInteger => f.write_str(
                "an integer beyond ±(2**53 - 1), the integers a JSON number carries exactly",
            ),
            Problem::LoneSurrogate => f.write_str(
                "a string holds a lone surrogate (U+D800..U+DFFF), which UTF-8 cannot carry",
            ),
            Problem::NonStringKey(type_name) => {
                write!(f, "an object key of type {type_name} (keys must be str)")
            }
            Problem::Unsupported(type_name) => write!(
                f,
                "a value of type {type_name} has no JSON form (JSON has dict, list, str, \
                 int, float, bool and None)"
            ),
            Problem::TooDeep => write!(f, "arrays and objects nest deeper than {MAX_DEPTH} levels"),
            Problem::Missing(name) => write!(f, "the object has no member {name:?}"),
            Problem::Python(message) => f.write_str(message),
            Problem::IndexMemberTaken(name) => write!(
                f,
                "the object already has member {name:?}, which is to hold its index"
            ),
            Problem::FormsOutsideList => {
                f.write_str("ObjectForms are written as list elements only (for their index)")
            }
        }
    }
}

/// One step from a container to the value that failed.
enum Step {
    Member(String),
    Index(usize),
}

/// A problem and the path to it, gathered while the walk unwinds.
struct Failure {
    problem: Problem,
    /// Innermost step first.
    steps: Vec<Step>,
}

impl From<Problem> for Failure {
    fn from(problem: Problem) -> Self {
        Failure {
            problem,
            steps: Vec::new(),
        }
    }
}

impl Failure {
    fn within(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// `<problem> at $.candidates[3].score`: member names that are not plain words are
    /// written as JSON strings in brackets.
    fn into_pyerr(self) -> PyErr {
        let mut message = self.problem.to_string();
        message.push_str(" at $");
        for step in self.steps.iter().rev() {
            match step {
                Step::Index(index) => {
                    let _ = write!(message, "[{index}]");
                }
                Step::Member(name) if is_plain_word(name) => {
                    message.push('.');
                    message.push_str(name);
                }
                Step::Member(name) => {
                    let mut quoted = Vec::new();
                    write_string(&mut quoted, name);
                    message.push('[');
                    message.push_str(&String::from_utf8_lossy(&quoted));
                    message.push(']');
                }
            }
        }
        CanonicalJsonError::new_err(message)
    }
}

fn is_plain_word(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

struct Writer<'py> {
    out: Vec<u8>,
    style: Style,
    /// Buffers to reuse for the canonical forms of an object's members (see
    /// [`Writer::write_both`]).
    spare: Vec<Vec<u8>>,
    /// A compact value written as a string of [`DIGEST_LEN`] bytes to be filled in later,
    /// at the offsets kept in `pending`.
    placeholder: Option<Bound<'py, PyAny>>,
    pending: Vec<usize>,
}

/// Hex digits in a SHA-256 digest.
const DIGEST_LEN: usize = 64;

/// An object's members: each name (checked to be a str) with its value.
type Members<'py> = Vec<(Bound<'py, PyString>, Bound<'py, PyAny>)>;

/// What a Python value is to JSON.
enum Kind<'a, 'py> {
    String(&'a Bound<'py, PyString>),
    Float(f64),
    Object(&'a Bound<'py, PyDict>),
    Bool(bool),
    Int(&'a Bound<'py, PyInt>),
    Array(&'a Bound<'py, PyList>),
    Null,
    Other,
}

impl<'a, 'py> Kind<'a, 'py> {
    fn of(value: &'a Bound<'py, PyAny>) -> Self {
        // Exact types first: each is one comparison of the type pointer, where a subclass
        // check asks the interpreter for the type's flags.
        if let Ok(text) = value.cast_exact::<PyString>() {
            Kind::String(text)
        } else if let Ok(number) = value.cast_exact::<PyFloat>() {
            Kind::Float(number.value())
        } else if let Ok(object) = value.cast_exact::<PyDict>() {
            Kind::Object(object)
        } else if let Ok(flag) = value.cast_exact::<PyBool>() {
            Kind::Bool(flag.is_true())
        } else if let Ok(integer) = value.cast_exact::<PyInt>() {
            Kind::Int(integer)
        } else if let Ok(array) = value.cast_exact::<PyList>() {
            Kind::Array(array)
        } else if value.is_none() {
            Kind::Null
        } else {
            Self::of_subclass(value)
        }
    }

    fn of_subclass(value: &'a Bound<'py, PyAny>) -> Self {
        if let Ok(text) = value.cast::<PyString>() {
            Kind::String(text)
        } else if let Ok(number) = value.cast::<PyFloat>() {
            Kind::Float(number.value())
        } else if let Ok(object) = value.cast::<PyDict>() {
            Kind::Object(object)
        } else if let Ok(integer) = value.cast::<PyInt>() {
            Kind::Int(integer)
        } else if let Ok(array) = value.cast::<PyList>() {
            Kind::Array(array)
        } else {
            Kind::Other
        }
    }
}

/// A thread's buffers, kept from one call to the next: a document's worth of output is
/// then written without growing a fresh buffer (and faulting its pages in) every time.
#[derive(Default)]
struct Buffers {
    out: Vec<u8>,
    canonical: Vec<u8>,
    spare: Vec<Vec<u8>>,
}

thread_local! {
    static KEPT: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// A buffer that grew beyond this (an unusually large document) is let go, not kept.
const KEEP_AT_MOST: usize = 8 << 20;

impl Buffers {
    /// The thread's kept buffers (empty ones if another call holds them).
    fn take() -> Buffers {
        KEPT.with(|kept| std::mem::take(&mut *kept.borrow_mut()))
    }

    fn keep(mut self) {
        for buffer in [&mut self.out, &mut self.canonical]
            .into_iter()
            .chain(self.spare.iter_mut())
        {
            buffer.clear();
            buffer.shrink_to(KEEP_AT_MOST);
        }
        KEPT.with(|kept| *kept.borrow_mut() = self);
    }
}

impl<'py> Writer<'py> {
    fn new(style: Style, buffers: &mut Buffers) -> Self {
        Writer {
            out: std::mem::take(&mut buffers.out),
            style,
            spare: std::mem::take(&mut buffers.spare),
            placeholder: None,
            pending: Vec::new(),
        }
    }

    /// Hands the buffers back to `buffers`.
    fn finish(self, buffers: &mut Buffers) {
        buffers.out = self.out;
        buffers.spare = self.spare;
    }

    /// `value` in this writer's style.
    fn write(&mut self, value: &Bound<'_, PyAny>, depth: usize) -> Result<(), Failure> {
        match Kind::of(value) {
            Kind::String(text) => write_string(&mut self.out, to_str(text)?),
            Kind::Float(number) => {
                let number = FiniteNumber::new(number).map_err(Problem::Number)?;
                match self.style {
                    Style::Canonical => number.write_jcs(&mut self.out),
                    Style::Compact => number.write_python(&mut self.out),
                }
            }
            Kind::Object(object) => self.write_object(object, depth + 1)?,
            Kind::Bool(flag) => self.out.extend_from_slice(bool_text(flag)),
            Kind::Int(integer) => self.write_int(integer)?,
            Kind::Array(array) => self.write_array(array, depth + 1)?,
            Kind::Null => self.out.extend_from_slice(b"null"),
            Kind::Other if self.placeholder.as_ref().is_some_and(|held| value.is(held)) => {
                self.out.push(b'"');
                self.pending.push(self.out.len());
                self.out.resize(self.out.len() + DIGEST_LEN, b'0');
                self.out.push(b'"');
            }
            Kind::Other if value.cast_exact::<ObjectForms>().is_ok() => {
                return Err(Problem::FormsOutsideList.into());
            }
            Kind::Other => return Err(Problem::Unsupported(type_name(value)).into()),
        }
        Ok(())
    }

    /// Writes `digest` where the placeholder was met.
    fn fill_in(&mut self, digest: &str) {
        for &offset in &self.pending {
            self.out[offset..offset + DIGEST_LEN].copy_from_slice(digest.as_bytes());
        }
    }

    fn write_int(&mut self, integer: &Bound<'_, PyInt>) -> Result<(), Failure> {
        match (integer.extract::<i64>(), self.style) {
            (Ok(value), Style::Canonical) => {
                write_safe_integer(&mut self.out, value).map_err(Problem::Number)?;
            }
            (Ok(value), Style::Compact) => write_integer(&mut self.out, value),
            (Err(_), Style::Canonical) => return Err(Problem::HugeInteger.into()),
            (Err(_), Style::Compact) => {
                // What `json.dumps` writes for any int, subclasses included.
                let digits = integer
                    .py()
                    .get_type::<PyInt>()
                    .call_method1("__repr__", (integer,))
                    .and_then(|text| text.extract::<String>())
                    .map_err(|error| Problem::Python(error.to_string()))?;
                self.out.extend_from_slice(digits.as_bytes());
            }
        }
        Ok(())
    }

    fn write_array(&mut self, array: &Bound<'_, PyList>, depth: usize) -> Result<(), Failure> {
        check_depth(depth)?;
        self.out.push(b'[');
        for (index, element) in array.iter().enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            if let Ok(forms) = element.cast_exact::<ObjectForms>() {
                let forms = forms.get();
                match self.style {
                    Style::Canonical => forms.write_canonical(&mut self.out, index),
                    Style::Compact => forms.write_compact(&mut self.out, index),
                }
                continue;
            }
            self.write(&element, depth)
                .map_err(|failure| failure.within(Step::Index(index)))?;
        }
        self.out.push(b']');
        Ok(())
    }

    fn write_object(&mut self, object: &Bound<'_, PyDict>, depth: usize) -> Result<(), Failure> {
        check_depth(depth)?;
        let members = members(object)?;
        let mut named = Vec::with_capacity(members.len());
        for (name, value) in &members {
            named.push((to_str(name)?, value));
        }
        if self.style == Style::Canonical {
            named.sort_unstable_by(|(a, _), (b, _)| utf16_order(a, b));
        }
        self.out.push(b'{');
        for (index, (name, value)) in named.into_iter().enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            write_string(&mut self.out, name);
            self.out.push(b':');
            self.write(value, depth)
                .map_err(|failure| failure.within(Step::Member(name.to_owned())))?;
        }
        self.out.push(b'}');
        Ok(())
    }

    /// `value` compact into this writer (whose style is [`Style::Compact`]) and canonical
    /// into `canonical`, in one walk: each string and number is read from Python once.
    fn write_both(
        &mut self,
        value: &Bound<'_, PyAny>,
        depth: usize,
        canonical: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        match Kind::of(value) {
            Kind::String(text) => {
                let text = to_str(text)?;
                write_string(&mut self.out, text);
                write_string(canonical, text);
            }
            Kind::Float(number) => {
                let number = FiniteNumber::new(number).map_err(Problem::Number)?;
                number.write_python(&mut self.out);
                number.write_jcs(canonical);
            }
            Kind::Object(object) => self.write_object_both(object, depth + 1, canonical)?,
            Kind::Bool(flag) => {
                self.out.extend_from_slice(bool_text(flag));
                canonical.extend_from_slice(bool_text(flag));
            }
            Kind::Int(integer) => {
                let value = integer.extract::<i64>().map_err(|_| Problem::HugeInteger)?;
                write_safe_integer(canonical, value).map_err(Problem::Number)?;
                write_integer(&mut self.out, value);
            }
            Kind::Array(array) => {
                check_depth(depth + 1)?;
                self.out.push(b'[');
                canonical.push(b'[');
                for (index, element) in array.iter().enumerate() {
                    if index > 0 {
                        self.out.push(b',');
                        canonical.push(b',');
                    }
                    if let Ok(forms) = element.cast_exact::<ObjectForms>() {
                        let forms = forms.get();
                        forms.write_compact(&mut self.out, index);
                        forms.write_canonical(canonical, index);
                        continue;
                    }
                    self.write_both(&element, depth + 1, canonical)
                        .map_err(|failure| failure.within(Step::Index(index)))?;
                }
                self.out.push(b']');
                canonical.push(b']');
            }
            Kind::Null => {
                self.out.extend_from_slice(b"null");
                canonical.extend_from_slice(b"null");
            }
            Kind::Other if value.cast_exact::<ObjectForms>().is_ok() => {
                return Err(Problem::FormsOutsideList.into());
            }
            Kind::Other => return Err(Problem::Unsupported(type_name(value)).into()),
        }
        Ok(())
    }

    /// An object for [`Writer::write_both`]: members go out compact in document order as
    /// they are walked, their canonical forms into a spare buffer, from which they are
    /// then copied in canonical order.
    fn write_object_both(
        &mut self,
        object: &Bound<'_, PyDict>,
        depth: usize,
        canonical: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        check_depth(depth)?;
        let members = members(object)?;
        let mut forms = self.spare.pop().unwrap_or_default();
        forms.clear();
        let named = self.write_members_both(&members, None, depth, &mut forms)?;
        self.out.push(b'}');
        write_canonical_object(
            canonical,
            named.into_iter().map(|(name, form)| (name, &forms[form])),
        );
        self.spare.push(forms);
        Ok(())
    }

    /// An object's opening brace and members, compact in document order as they are
    /// walked (no closing brace); their canonical forms go into `forms`, and the names with
    /// where each form is are returned in canonical order. A member named `refused` is an
    /// error: the caller writes one of that name itself.
    fn write_members_both<'m>(
        &mut self,
        members: &'m Members<'_>,
        refused: Option<&str>,
        depth: usize,
        forms: &mut Vec<u8>,
    ) -> Result<Vec<(&'m str, Range<usize>)>, Failure> {
        let mut named = Vec::with_capacity(members.len());
        self.out.push(b'{');
        for (index, (name, value)) in members.iter().enumerate() {
            let name = to_str(name)?;
            if refused == Some(name) {
                return Err(Problem::IndexMemberTaken(name.to_owned()).into());
            }
            if index > 0 {
                self.out.push(b',');
            }
            write_string(&mut self.out, name);
            self.out.push(b':');
            let start = forms.len();
            self.write_both(value, depth, forms)
                .map_err(|failure| failure.within(Step::Member(name.to_owned())))?;
            named.push((name, start..forms.len()));
        }
        named.sort_unstable_by(|(a, _), (b, _)| utf16_order(a, b));
        Ok(named)
    }

    /// `document` compact, and the canonical form of the object made of the members
    /// `content` of its member `holder` (written to `canonical`).
    fn write_document(
        &mut self,
        document: &Bound<'_, PyAny>,
        holder: &str,
        content: &[String],
        canonical: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        let Ok(document) = document.cast::<PyDict>() else {
            return Err(Problem::Unsupported(type_name(document)).into());
        };
        let mut forms: Vec<Option<Vec<u8>>> = vec![None; content.len()];
        let mut seen_holder = false;
        self.out.push(b'{');
        for (index, (name, value)) in members(document)?.iter().enumerate() {
            let name = to_str(name)?;
            if index > 0 {
                self.out.push(b',');
            }
            write_string(&mut self.out, name);
            self.out.push(b':');
            let written = if name == holder {
                seen_holder = true;
                self.write_holder(value, content, &mut forms)
            } else {
                self.write(value, 1)
            };
            written.map_err(|failure| failure.within(Step::Member(name.to_owned())))?;
        }
        self.out.push(b'}');
        if !seen_holder {
            return Err(Problem::Missing(holder.to_owned()).into());
        }
        let mut named = Vec::with_capacity(content.len());
        for (name, form) in content.iter().zip(forms) {
            let Some(form) = form else {
                return Err(Failure::from(Problem::Missing(name.clone()))
                    .within(Step::Member(holder.to_owned())));
            };
            named.push((name.as_str(), form));
        }
        named.sort_unstable_by(|(a, _), (b, _)| utf16_order(a, b));
        write_canonical_object(
            canonical,
            named.iter().map(|(name, form)| (*name, form.as_slice())),
        );
        Ok(())
    }

    /// The member of the document that holds the content: compact, with the canonical
    /// form of each content member kept in `forms` (in the order of `content`).
    fn write_holder(
        &mut self,
        holder: &Bound<'_, PyAny>,
        content: &[String],
        forms: &mut [Option<Vec<u8>>],
    ) -> Result<(), Failure> {
        let Ok(holder) = holder.cast::<PyDict>() else {
            return Err(Problem::Unsupported(type_name(holder)).into());
        };
        self.out.push(b'{');
        for (index, (name, value)) in members(holder)?.iter().enumerate() {
            let name = to_str(name)?;
            if index > 0 {
                self.out.push(b',');
            }
            write_string(&mut self.out, name);
            self.out.push(b':');
            let written = match content.iter().position(|wanted| wanted == name) {
                Some(slot) => {
                    let mut form = Vec::new();
                    let written = self.write_both(value, 2, &mut form);
                    forms[slot] = Some(form);
                    written
                }
                None => self.write(value, 2),
            };
            written.map_err(|failure| failure.within(Step::Member(name.to_owned())))?;
        }
        self.out.push(b'}');
        Ok(())
    }
}

/// An object written both ways once, compact (members in document order) and RFC 8785,
/// but for one integer member, its index: written last in document order and at its
/// place in the canonical order, it is the object's position in the list that holds it.
/// What an overlay's candidate is kept as between renders, its rank being that position.
#[pyclass(frozen, module = "grid._native")]
pub struct ObjectForms {
    /// Compact up to the index: `{"a":1,"rank":`.
    compact_head: Vec<u8>,
    /// Canonical up to the index: `{"a":1,"rank":`.
    canonical_head: Vec<u8>,
    /// Canonical after the index: `,"s":2}`, or `}` when the index member sorts last.
    canonical_tail: Vec<u8>,
}

impl ObjectForms {
    fn write_compact(&self, out: &mut Vec<u8>, index: usize) {
        out.extend_from_slice(&self.compact_head);
        write_index(out, index);
        out.push(b'}');
    }

    fn write_canonical(&self, out: &mut Vec<u8>, index: usize) {
        out.extend_from_slice(&self.canonical_head);
        write_index(out, index);
        out.extend_from_slice(&self.canonical_tail);
    }

    fn of(object: &Bound<'_, PyDict>, index_member: &str) -> Result<Self, Failure> {
        let members = members(object)?;
        let mut buffers = Buffers::take();
        let mut writer = Writer::new(Style::Compact, &mut buffers);
        let mut forms = std::mem::take(&mut buffers.canonical);
        forms.clear();
        let written = writer.write_members_both(&members, Some(index_member), 1, &mut forms);
        let result = written.map(|named| {
            let mut compact_head = writer.out.clone();
            if !named.is_empty() {
                compact_head.push(b',');
            }
            write_string(&mut compact_head, index_member);
            compact_head.push(b':');
            let index_at = named
                .partition_point(|(name, _)| utf16_order(name, index_member) == Ordering::Less);
            let mut canonical_head = vec![b'{'];
            for (name, form) in &named[..index_at] {
                write_string(&mut canonical_head, name);
                canonical_head.push(b':');
                canonical_head.extend_from_slice(&forms[form.clone()]);
                canonical_head.push(b',');
            }
            write_string(&mut canonical_head, index_member);
            canonical_head.push(b':');
            let mut canonical_tail = Vec::new();
            for (name, form) in &named[index_at..] {
                canonical_tail.push(b',');
                write_string(&mut canonical_tail, name);
                canonical_tail.push(b':');
                canonical_tail.extend_from_slice(&forms[form.clone()]);
            }
            canonical_tail.push(b'}');
            ObjectForms {
                compact_head,
                canonical_head,
                canonical_tail,
            }
        });
        writer.finish(&mut buffers);
        buffers.canonical = forms;
        buffers.keep();
        result
    }
}

fn write_index(out: &mut Vec<u8>, index: usize) {
    // A list's length fits an i64 on every platform Python runs on.
    write_integer(out, i64::try_from(index).unwrap_or(i64::MAX));
}

#[pymethods]
impl ObjectForms {
    #[new]
    fn new(value: &Bound<'_, PyDict>, index_member: &str) -> PyResult<Self> {
        Self::of(value, index_member).map_err(Failure::into_pyerr)
    }
}

/// An object from its members' names and canonical forms, given in canonical order.
fn write_canonical_object<'a>(out: &mut Vec<u8>, named: impl Iterator<Item = (&'a str, &'a [u8])>) {
    out.push(b'{');
    for (index, (name, form)) in named.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_string(out, name);
        out.push(b':');
        out.extend_from_slice(form);
    }
    out.push(b'}');
}

fn check_depth(depth: usize) -> Result<(), Failure> {
    if depth > MAX_DEPTH {
        return Err(Problem::TooDeep.into());
    }
    Ok(())
}

fn to_str<'a>(text: &'a Bound<'_, PyString>) -> Result<&'a str, Failure> {
    Ok(text.to_str().map_err(|_| Problem::LoneSurrogate)?)
}

fn bool_text(flag: bool) -> &'static [u8] {
    if flag {
        b"true"
    } else {
        b"false"
    }
}

/// `object`'s members, refusing a name that is not a str.
fn members<'py>(object: &Bound<'py, PyDict>) -> Result<Members<'py>, Failure> {
    let mut members = Vec::with_capacity(object.len());
    for (key, value) in object.iter() {
        match key.cast_into::<PyString>() {
            Ok(name) => members.push((name, value)),
            Err(error) => {
                return Err(Problem::NonStringKey(type_name(&error.into_inner())).into());
            }
        }
    }
    Ok(members)
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "value of unknown type".to_owned())
}

/// `value` in `style`, handed to `consume`.
fn serialize<T>(
    value: &Bound<'_, PyAny>,
    style: Style,
    consume: impl FnOnce(&[u8]) -> T,
) -> PyResult<T> {
    let mut buffers = Buffers::take();
    let mut writer = Writer::new(style, &mut buffers);
    let written = writer.write(value, 0);
    let result = written.map(|()| consume(&writer.out));
    writer.finish(&mut buffers);
    buffers.keep();
    result.map_err(Failure::into_pyerr)
}

/// The RFC 8785 canonical JSON of `value`.
#[pyfunction]
fn canonical_json<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    serialize(value, Style::Canonical, |canonical| {
        PyBytes::new(value.py(), canonical)
    })
}

/// Lowercase hex SHA-256 of the RFC 8785 canonical JSON of `value`.
#[pyfunction]
fn canonical_digest(value: &Bound<'_, PyAny>) -> PyResult<String> {
    serialize(value, Style::Canonical, sha256_hex)
}

/// `value` as `json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()`
/// writes it, for JSON values (NaN and infinities refused).
#[pyfunction]
fn compact_json<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    serialize(value, Style::Compact, |compact| {
        PyBytes::new(value.py(), compact)
    })
}

/// `compact_json(document)` and `canonical_digest({name: document[holder][name] for name
/// in content})`, from one walk of the document; `digest_placeholder` (by identity) stands
/// for the digest in the document and is written as it.
#[pyfunction]
fn compact_json_and_digest<'py>(
    document: &Bound<'py, PyAny>,
    holder: &str,
    content: Vec<String>,
    digest_placeholder: Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let mut buffers = Buffers::take();
    let mut writer = Writer::new(Style::Compact, &mut buffers);
    writer.placeholder = Some(digest_placeholder);
    let mut canonical = std::mem::take(&mut buffers.canonical);
    let written = writer.write_document(document, holder, &content, &mut canonical);
    let result = written.map(|()| {
        let digest = sha256_hex(&canonical);
        writer.fill_in(&digest);
        (PyBytes::new(document.py(), &writer.out), digest)
    });
    writer.finish(&mut buffers);
    buffers.canonical = canonical;
    buffers.keep();
    result.map_err(Failure::into_pyerr)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(canonical_json, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_digest, m)?)?;
    m.add_function(wrap_pyfunction!(compact_json, m)?)?;
    m.add_function(wrap_pyfunction!(compact_json_and_digest, m)?)?;
    m.add_class::<ObjectForms>()?;
    m.add("MAX_JSON_DEPTH", MAX_DEPTH)?;
    Ok(())
}
