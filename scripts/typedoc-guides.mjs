// A TypeDoc plugin: the guides that typedoc.json renders as pages (projectDocuments) go under one
// "Guides" category of the reference's navigation instead of "Other". TypeDoc reads a document's
// category from its front matter, which the Markdown does without: GitHub shows front matter as a
// table at the top of the page.
import { Converter } from 'typedoc';

export function load(app) {
  app.converter.on(Converter.EVENT_CREATE_DOCUMENT, (_context, doc) => {
    doc.frontmatter.category ??= 'Guides';
  });
}
