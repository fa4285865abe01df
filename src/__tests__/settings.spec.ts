import schema from '../../schema/plugin.json';
import { DEFAULT_SETTINGS } from '../settings';

/**
 * The panel starts with DEFAULT_SETTINGS until the settings registry has
 * loaded the user's: they must be the schema's defaults, or the panel would
 * change under the user a moment after it opens.
 */
describe('the panel settings', () => {
  it('start as the schema says', () => {
    const defaults = Object.fromEntries(
      Object.entries(schema.properties).map(([name, property]) => [
        name,
        property.default
      ])
    );
    expect(DEFAULT_SETTINGS).toEqual(defaults);
  });
});
