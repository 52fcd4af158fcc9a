// Printed output wraps at the column edge (book.css), except a table printed as text (rows of columns
// separated by runs of spaces, e.g. a DataFrame's repr): wrapped, its columns would no longer line up, so
// it keeps its lines and scrolls. tests/test_browser.py uses the same rule to find such tables.
document.addEventListener("DOMContentLoaded", () => {
  const isRow = (line) => (line.match(/\S {2,}(?=\S)/g) || []).length >= 2;
  for (const pre of document.querySelectorAll("div.cell_output pre, div.output pre")) {
    if (pre.textContent.split("\n").filter(isRow).length >= 3) pre.classList.add("text-table");
  }
});
