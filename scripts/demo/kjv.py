"""The King James Version (1611, public domain) as plain text, from Debian's bible-kjv
package: its `bible` program prints the text that bible-kjv-text ships compressed."""
import re
import shutil
import subprocess

_CHAPTER = re.compile(r"^(?P<book>(?:[1-3] )?[A-Z][A-Za-z ]*) (?P<chapter>\d+)$")
_VERSE = re.compile(r"^ *(?P<verse>\d+) (?P<text>.+)$")


def read_chapters():
    """[(title, [verse text, ...]), ...] for the 1,189 chapters, verse numbers dropped and
    runs of spaces made one; checks that every chapter's verses run 1, 2, 3, ..."""
    program = shutil.which("bible")
    if program is None:
        raise SystemExit("the `bible` program is missing: apt-get install bible-kjv")
    raw = subprocess.run([program, "-l", "100000", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters = []
    for line in raw.split("\n"):
        if not line.strip():
            continue
        if (m := _CHAPTER.match(line)):
            chapters.append((line, []))
            continue
        m = _VERSE.match(line)
        if m is None or not chapters:
            raise ValueError(f"bible printed a line that is neither a chapter title nor a verse: {line!r}")
        verses = chapters[-1][1]
        if int(m["verse"]) != len(verses) + 1:
            raise ValueError(f"{chapters[-1][0]}: verse {m['verse']} after verse {len(verses)}")
        verses.append(" ".join(m["text"].split()))
    verse_count = sum(len(v) for _, v in chapters)
    if len(chapters) != 1189 or verse_count != 31102:
        raise ValueError(f"expected 1189 chapters and 31102 verses, read {len(chapters)} and {verse_count}")
    return chapters
